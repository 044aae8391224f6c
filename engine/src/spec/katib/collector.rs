//! The Experiment's `metricsCollectorSpec`: the `StdOut` and `File` collectors and their
//! `metricsFormat` filters, as Katib validates and reads them.

use crate::spec::decode::Cx;
use crate::spec::diagnostic::Pos;
use crate::spec::model::{FileFormat, MetricsFile};
use crate::spec::yaml::Node;

/// Katib's default path of the `File` collector's file (its webhook's `DefaultFilePath`).
const KATIB_METRICS_PATH: &str = "/var/log/katib/metrics.log";

/// What an Experiment's `metricsCollectorSpec` asks of its trials, when sluice can honour it.
#[derive(Default)]
pub(super) struct Collector {
    /// `source.filter.metricsFormat`.
    pub(super) filters: Vec<String>,
    /// The `File` collector's file, and where its path was written (the collector's kind
    /// when the path is Katib's default).
    pub(super) file: Option<(MetricsFile, Pos)>,
}

/// `metricsCollectorSpec`: `StdOut` (the default; the trial's standard output and error) and
/// `File` (a file the trial writes, see [`MetricsFile`]), with `metricsFormat` filters, as
/// Katib validates and reads them. None after reporting what cannot be honoured.
pub(super) fn metrics_collector(cx: &mut Cx<'_>, node: &Node) -> Option<Collector> {
    cx.fields(node, "metricsCollectorSpec", &["collector", "source"])?;
    let mut ok = true;
    let collector = node.get("collector");
    let kind_node = collector.and_then(|c| c.get("kind"));
    if let Some(c) = collector
        && let Some(fields) = cx.fields(
            c,
            "metricsCollectorSpec.collector",
            &["kind", "customCollector"],
        )
        && let Some(custom) = fields.iter().find(|e| e.key == "customCollector")
    {
        cx.d.error(custom.key_pos, "metricsCollectorSpec.collector.customCollector cannot be honoured by sluice")
            .help("sluice runs no collector container; print NAME=VALUE lines (kind: StdOut) or write them to a file (kind: File)");
        ok = false;
    }
    let kind = match kind_node {
        None => "StdOut".to_owned(),
        Some(k) => cx.string(k, "metricsCollectorSpec.collector.kind")?,
    };
    let kind_pos = kind_node.map_or(node.pos, |k| k.pos);
    let file_kind = match kind.as_str() {
        "StdOut" => false,
        "File" => true,
        other => {
            let why = match other {
                "None" | "Push" => {
                    "with this kind the trial sends its metrics to Katib's DB manager itself, which does not run here"
                }
                "TensorFlowEvent" => "sluice does not read TensorFlow event files",
                "PrometheusMetric" => "sluice does not scrape a trial's Prometheus endpoint",
                "Custom" => "sluice runs no collector container",
                _ => {
                    "Katib's collector kinds are StdOut, File, TensorFlowEvent, PrometheusMetric, Custom, None and Push"
                }
            };
            cx.d.error(kind_pos, format!("metrics collector '{other}' cannot be honoured by sluice"))
                .help(why)
                .help("sluice reads NAME=VALUE lines of the trial's output (kind: StdOut) or of a file it writes (kind: File), and $SLUICE_METRICS_FILE");
            return None;
        }
    };
    let mut out = Collector::default();
    let source = node.get("source");
    let mut path: Option<(String, Pos)> = None;
    let mut format = FileFormat::Text;
    let mut filter_at = None;
    if let Some(source) = source
        && let Some(fields) = cx.fields(
            source,
            "metricsCollectorSpec.source",
            &["filter", "fileSystemPath", "httpGet"],
        )
    {
        for e in fields {
            match e.key.as_str() {
                "httpGet" => {
                    cx.d.error(e.key_pos, "metricsCollectorSpec.source.httpGet cannot be honoured by sluice")
                        .help("it is where the PrometheusMetric collector scrapes; sluice reads the trial's output or its metrics file");
                    ok = false;
                }
                "filter" => {
                    filter_at = Some(e.key_pos);
                    let Some(f) = cx.fields(
                        &e.value,
                        "metricsCollectorSpec.source.filter",
                        &["metricsFormat"],
                    ) else {
                        ok = false;
                        continue;
                    };
                    let Some(formats) = f.iter().find(|x| x.key == "metricsFormat") else {
                        continue;
                    };
                    let Some(list) = cx.string_list(
                        &formats.value,
                        "metricsFormat",
                        "a list of regular expressions",
                    ) else {
                        ok = false;
                        continue;
                    };
                    for (re, pos) in list {
                        match sluice_runtime::metrics::check_filter(&re) {
                            Ok(()) => out.filters.push(re),
                            Err(e) => {
                                cx.d.error(pos, format!("metricsFormat '{re}' cannot be read: {e}"))
                                    .help("a filter is a regular expression with two groups: the metric's name, then its value, as in ([\\w|-]+)\\s*=\\s*([+-]?\\d*(\\.\\d+)?)");
                                ok = false;
                            }
                        }
                    }
                }
                "fileSystemPath" if !file_kind => {
                    // Katib's StdOut collector reads the container's log whatever this says.
                    cx.d.warning(e.key_pos, "fileSystemPath has no effect with the StdOut collector")
                        .help("Katib reads it for the File and TensorFlowEvent collectors; remove it, or write collector kind: File");
                }
                "fileSystemPath" => {
                    let Some(fs) = cx.fields(
                        &e.value,
                        "metricsCollectorSpec.source.fileSystemPath",
                        &["path", "kind", "format"],
                    ) else {
                        ok = false;
                        continue;
                    };
                    for x in fs {
                        match x.key.as_str() {
                            "path" => {
                                if let Some(p) = cx.string(&x.value, "fileSystemPath.path") {
                                    path = Some((p, x.value.pos));
                                } else {
                                    ok = false;
                                }
                            }
                            "kind" => match cx.string(&x.value, "fileSystemPath.kind").as_deref() {
                                Some("File") => {}
                                Some(other) => {
                                    cx.d.error(x.value.pos, format!("fileSystemPath kind '{other}' is not File"))
                                        .help("the File collector reads one file (kind: File); a Directory is for the TensorFlowEvent collector");
                                    ok = false;
                                }
                                None => ok = false,
                            },
                            _ => {
                                match cx.string(&x.value, "fileSystemPath.format").as_deref() {
                                    Some("TEXT") => format = FileFormat::Text,
                                    Some("JSON") => format = FileFormat::Json,
                                    Some(other) => {
                                        let d = cx.d.error(x.value.pos, format!("fileSystemPath format '{other}' is not TEXT or JSON"));
                                        d.suggest(other, ["TEXT", "JSON"]);
                                        if d.help.is_empty() {
                                            d.help("TEXT: lines of NAME=VALUE (or what source.filter matches); JSON: one object per line");
                                        }
                                        ok = false;
                                    }
                                    None => ok = false,
                                }
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }
    if file_kind {
        if let (FileFormat::Json, Some(at)) = (format, filter_at) {
            cx.d.error(at, "source.filter is for TEXT metrics files")
                .help(
                    "a JSON metrics file is read by its keys, as Katib reads it; remove the filter",
                );
            ok = false;
        }
        let (path, pos) = path.unwrap_or_else(|| (KATIB_METRICS_PATH.to_owned(), kind_pos));
        let parts = std::path::Path::new(&path).components();
        if !path.starts_with('/')
            || parts
                .into_iter()
                .any(|c| c == std::path::Component::ParentDir)
        {
            cx.d.error(
                pos,
                format!("fileSystemPath.path '{path}' is not an absolute path without '..'"),
            )
            .help("Katib needs the metrics file's absolute path, as /var/log/katib/metrics.log");
            ok = false;
        }
        out.file = Some((
            MetricsFile {
                path,
                format,
                names: Vec::new(),
            },
            pos,
        ));
    }
    ok.then_some(out)
}
