//! The pipeline the crash tests kill engines and servers under: every step instance writes
//! `starts/STEP` when its program starts and `done/STEP` when it completes, so that a test
//! can count how often each ran.

/// A diamond with a fan-out in the middle: 8 step instances, each writing `starts/STEP` when
/// its program starts and `done/STEP` when it completes.
pub const PIPELINE: &str = r#"apiVersion: sluice.dev/v1
kind: Pipeline
metadata: {name: crashy}
spec:
  defaults:
    resources: {cpu: 100m}
  steps:
    - name: prep
      run: &work |
        echo start >> "starts/$SLUICE_STEP"
        sleep 0.3
        echo done >> "done/$SLUICE_STEP"
        echo "$SLUICE_STEP" > "$SLUICE_OUTPUT_DIR/o"
      outputs: [o]
    - name: left
      needs: [prep]
      run: *work
      outputs: [o]
    - name: right
      needs: [prep]
      run: *work
      outputs: [o]
    - name: shard
      needs: [left]
      forEach: [a, b, c]
      run: *work
      outputs: [o]
    - name: join
      needs: [shard, right]
      run: *work
      outputs: [o]
    - name: publish
      needs: [join]
      run: cat {{steps.join.outputs.o}} && echo start >> starts/publish && echo done >> done/publish
"#;

pub const STEPS: [&str; 8] = [
    "prep", "left", "right", "shard[0]", "shard[1]", "shard[2]", "join", "publish",
];
