//! The object store on a local folder: files and folders round-trip, outputs taken by
//! renaming where they may be (or kept only from inside their folder), and the URL schemes it
//! refuses.

use super::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime")
}

#[test]
fn files_and_folders_round_trip() {
    let tmp = std::env::temp_dir().join(format!("sluice-objects-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let src = tmp.join("src");
    std::fs::create_dir_all(src.join("model/sub")).expect("mkdir");
    std::fs::write(src.join("model/a.bin"), b"aaa").expect("write");
    std::fs::write(src.join("model/sub/b.txt"), b"bb").expect("write");
    std::fs::write(src.join("model/odd [1]%.txt"), b"o").expect("write");
    std::fs::write(src.join("metrics.json"), b"{}").expect("write");
    let objects = Objects::open(&default_url(&tmp)).expect("open");
    runtime().block_on(async {
        assert_eq!(
            objects
                .put_path(&src.join("model"), "t/model")
                .await
                .expect("put"),
            3
        );
        assert_eq!(
            objects
                .put_path(&src.join("metrics.json"), "t/m.json")
                .await
                .expect("put"),
            1
        );
        assert!(objects.exists("t/model").await.expect("exists"));
        assert!(objects.exists("t/m.json").await.expect("exists"));
        assert!(!objects.exists("t/nothing").await.expect("exists"));
        // "t/mod" is a prefix of "t/model" as text, not as a path.
        assert!(!objects.exists("t/mod").await.expect("exists"));
        objects
            .get_path("t/model", &tmp.join("back/model"))
            .await
            .expect("get");
        objects
            .get_path("t/m.json", &tmp.join("back/m.json"))
            .await
            .expect("get");
        assert!(matches!(
            objects.get_path("t/nothing", &tmp.join("x")).await,
            Err(Error::Missing { .. })
        ));
        let mut seen = Vec::new();
        objects
            .read_into("t/model", &mut |b| seen.extend_from_slice(b))
            .await
            .expect("read");
        assert_eq!(seen, b"a.bin\0aaa\0odd [1]%.txt\0o\0sub/b.txt\0bb\0");
        // Step names with brackets (fan-out children) work as keys.
        objects
            .put_path(&src.join("metrics.json"), "t/shard[0]/outputs/m")
            .await
            .expect("put");
        assert!(
            objects
                .exists("t/shard[0]/outputs/m")
                .await
                .expect("exists")
        );
    });
    assert_eq!(
        std::fs::read(tmp.join("back/model/sub/b.txt")).expect("read"),
        b"bb"
    );
    assert_eq!(std::fs::read(tmp.join("back/m.json")).expect("read"), b"{}");
    assert_eq!(
        std::fs::read(tmp.join("back/model/odd [1]%.txt")).expect("read"),
        b"o"
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn a_folder_store_takes_outputs_by_renaming_what_it_may() {
    use std::os::unix::fs::MetadataExt;
    let tmp = std::env::temp_dir().join(format!("sluice-take-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let out = tmp.join("out");
    std::fs::create_dir_all(out.join("model/sub")).expect("mkdir");
    std::fs::create_dir_all(tmp.join("elsewhere")).expect("mkdir");
    std::fs::write(out.join("blob"), b"blob").expect("write");
    std::fs::write(out.join("model/a.bin"), b"aaa").expect("write");
    std::fs::write(out.join("model/sub/b [0].txt"), b"bb").expect("write");
    // Shares its inode with a file outside: copied, so the two stay independent.
    std::fs::write(tmp.join("elsewhere/shared"), b"shared").expect("write");
    std::fs::hard_link(tmp.join("elsewhere/shared"), out.join("model/shared")).expect("link");
    // Links to what is not ours: their targets are copied and stay.
    std::fs::write(tmp.join("elsewhere/data"), b"data").expect("write");
    std::os::unix::fs::symlink(tmp.join("elsewhere/data"), out.join("model/data"))
        .expect("symlink");
    std::os::unix::fs::symlink(tmp.join("elsewhere"), out.join("dir")).expect("symlink");
    let objects = Objects::open(&default_url(&tmp)).expect("open");
    let stored = tmp.join("objects/k");
    runtime().block_on(async {
        assert_eq!(
            objects
                .take_path(&out.join("blob"), "k/blob", Links::Followed)
                .await
                .expect("take"),
            1
        );
        assert_eq!(
            objects
                .take_path(&out.join("model"), "k/model", Links::Followed)
                .await
                .expect("take"),
            4
        );
        assert_eq!(
            objects
                .take_path(&out.join("dir"), "k/dir", Links::Followed)
                .await
                .expect("take"),
            2
        );
        let usage = objects.usage_under("k").await.expect("usage");
        assert_eq!(
            usage,
            Usage {
                files: 7,
                bytes: 4 + 3 + 2 + 6 + 4 + 6 + 4
            }
        );
        assert_eq!(
            objects.folders_under("k").await.expect("list"),
            ["dir", "model"]
        );
        assert_eq!(
            objects.folders_under("nothing/here").await.expect("list"),
            Vec::<String>::new()
        );
    });
    // Renamed: gone from out/, one link in the store.
    assert!(!out.join("blob").exists());
    assert!(!out.join("model/a.bin").exists());
    assert_eq!(std::fs::read(stored.join("blob")).expect("read"), b"blob");
    assert_eq!(
        std::fs::metadata(stored.join("model/a.bin"))
            .expect("meta")
            .nlink(),
        1
    );
    let mut back = Vec::new();
    runtime().block_on(async {
        objects
            .read_into("k/model", &mut |b| back.extend_from_slice(b))
            .await
            .expect("read");
    });
    assert_eq!(
        back,
        b"a.bin\0aaa\0data\0data\0shared\0shared\0sub/b [0].txt\0bb\0"
    );
    // Copied: the sources stay, and the stored copies are files of their own.
    assert!(out.join("model/shared").is_file());
    assert_eq!(
        std::fs::metadata(tmp.join("elsewhere/shared"))
            .expect("meta")
            .nlink(),
        2
    );
    assert!(std::fs::symlink_metadata(stored.join("model/data")).is_ok_and(|m| m.is_file()));
    assert_eq!(
        std::fs::read(tmp.join("elsewhere/data")).expect("read"),
        b"data"
    );
    // Deleting under a prefix says what it removed, and again removes nothing.
    runtime().block_on(async {
        let gone = objects.delete_under("k/model").await.expect("delete");
        assert_eq!(gone.files, 4);
        assert!(!objects.exists("k/model").await.expect("exists"));
        assert!(objects.exists("k/blob").await.expect("exists"));
        assert_eq!(
            objects.delete_under("k/model").await.expect("delete"),
            Usage::default()
        );
    });
    let _ = std::fs::remove_dir_all(&tmp);
}

/// With `Links::Within`, what is kept never comes from outside the folder: a link out of it
/// (to a file, from inside a folder, climbing up), a link to a folder holding it, a FIFO
/// (never opened, so never waited on) refuse the whole output and keep none of it, for a
/// folder store and whatever it could rename; links inside are kept as copies.
#[test]
fn outputs_kept_within_their_folder_never_read_outside_it() {
    use std::os::unix::fs::symlink;
    let tmp = std::env::temp_dir().join(format!("sluice-within-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let out = tmp.join("attempt/out");
    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(tmp.join("secret"), b"secret").expect("write");
    let objects = Objects::open(&default_url(&tmp.join("store"))).expect("open");
    let within = Links::Within(&out);
    let refused = |name: &str, why: &str| {
        let e = runtime()
            .block_on(objects.take_path(&out.join(name), &format!("k/{name}"), within))
            .expect_err(name);
        assert!(
            matches!(&e, Error::Refused { why: w, .. } if w.contains(why)),
            "{name}: {e}"
        );
        assert!(
            !runtime()
                .block_on(objects.exists(&format!("k/{name}")))
                .expect("exists"),
            "{name}: something was kept"
        );
        e.to_string()
    };

    symlink(tmp.join("secret"), out.join("file")).expect("symlink");
    let e = refused("file", "is a link to");
    assert!(
        e.contains(&format!(
            "{} is a link to {}, outside {}",
            out.join("file").display(),
            tmp.join("secret").display(),
            std::fs::canonicalize(&out).expect("out").display()
        )),
        "{e}"
    );
    std::fs::create_dir_all(out.join("folder")).expect("mkdir");
    std::fs::write(out.join("folder/a"), b"a").expect("write");
    symlink(tmp.join("secret"), out.join("folder/b")).expect("symlink");
    refused("folder", "outside");
    std::fs::create_dir_all(out.join("up")).expect("mkdir");
    symlink("../..", out.join("up/parent")).expect("symlink");
    refused("up", "is a link to ../.., outside");
    std::fs::create_dir_all(out.join("loop")).expect("mkdir");
    symlink(".", out.join("loop/again")).expect("symlink");
    refused("loop", "a folder that holds it");
    nix::unistd::mkfifo(&out.join("fifo"), nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    refused("fifo", "neither a regular file nor a folder");

    // Inside: a file, a folder with a link to a file beside it, a link to another output.
    std::fs::write(out.join("real.bin"), b"real").expect("write");
    std::fs::create_dir_all(out.join("model")).expect("mkdir");
    std::fs::write(out.join("model/a.bin"), b"aaa").expect("write");
    symlink("../real.bin", out.join("model/b.bin")).expect("symlink");
    symlink("real.bin", out.join("alias")).expect("symlink");
    runtime().block_on(async {
        for (name, n) in [("real.bin", 1), ("model", 2), ("alias", 1)] {
            assert_eq!(
                objects
                    .take_path(&out.join(name), &format!("k/{name}"), within)
                    .await
                    .expect(name),
                n,
                "{name}"
            );
        }
        let mut back = Vec::new();
        objects
            .read_into("k/model", &mut |b| back.extend_from_slice(b))
            .await
            .expect("read");
        assert_eq!(back, b"a.bin\0aaa\0b.bin\0real\0");
        assert_eq!(
            objects.get_bytes("k/alias").await.expect("read"),
            Some(b"real".to_vec())
        );
    });
    // Copied, not renamed: a pod's files stay where they are; the stored ones are files.
    assert!(out.join("model/a.bin").is_file());
    let stored = tmp.join("store/objects/k/model/b.bin");
    assert!(
        std::fs::symlink_metadata(&stored).is_ok_and(|m| m.is_file()),
        "{}",
        stored.display()
    );
    let _ = std::fs::remove_dir_all(&tmp);
}

#[test]
fn other_schemes_are_refused_by_name() {
    let e = Objects::open("gs://bucket").expect_err("refused");
    assert!(e.to_string().contains("gs://bucket"), "{e}");
    assert!(Objects::open("file://relative/path").is_err());
}

/// A pod's Secret arrives under `SLUICE_OBJECTS_`: its values win over plain `AWS_*` ones,
/// and other variables are not S3 settings.
#[test]
fn s3_settings_come_from_aws_variables_and_the_prefixed_secret_over_them() {
    use std::ffi::OsString;
    let env = [
        ("AWS_REGION", "eu-west-1"),
        ("AWS_ACCESS_KEY_ID", "plain"),
        ("SLUICE_OBJECTS_AWS_ACCESS_KEY_ID", "from-secret"),
        ("SLUICE_OBJECTS_OTHER", "ignored"),
        ("HOME", "/root"),
    ]
    .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let vars = super::s3_vars(env);
    assert_eq!(
        vars.get("AWS_ACCESS_KEY_ID").map(String::as_str),
        Some("from-secret")
    );
    assert_eq!(
        vars.get("AWS_REGION").map(String::as_str),
        Some("eu-west-1")
    );
    assert_eq!(vars.len(), 2, "{vars:?}");
}
