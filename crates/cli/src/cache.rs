//! `plumb list` and `plumb rm`: the models in plumb's cache, as a user manages them. Which files
//! are cached and how one is removed is `checkpoint::source`'s; this adds what each file holds.

use anyhow::Result;
use plumb_checkpoint::GgufFile;
use plumb_checkpoint::hparams::hf_architecture;
use plumb_checkpoint::source;
use plumb_models::registry::{GATES_PASSED, family_of};

/// The backend `plumb list` reports gates for: the only one the CLI picks today.
const BACKEND_KIND: &str = "cpu";

/// Architecture and gate columns of one cached file.
fn describe(path: &std::path::Path) -> (String, String) {
    let file = match GgufFile::open(path) {
        Ok(f) => f,
        Err(e) => return (format!("unreadable: {e}"), "-".into()),
    };
    let Ok(arch) = file.get_str("general.architecture") else {
        return ("unknown (no general.architecture)".into(), "-".into());
    };
    let hf = hf_architecture(arch).unwrap_or(arch);
    let Some(family) = family_of(hf) else {
        return (format!("{arch} (not supported)"), "-".into());
    };
    let passed = GATES_PASSED.iter().any(|&(f, b, _)| f == family && b == BACKEND_KIND);
    let gate = if passed { "passed".to_string() } else { format!("not passed (PLUMB_EXPERIMENTAL={family} runs it)") };
    (format!("{arch} (family {family})"), gate)
}

pub fn list() -> Result<()> {
    let home = source::plumb_home()?;
    let models = source::cached_models(&home)?;
    if models.is_empty() {
        eprintln!("no models cached in {}; `plumb pull` fetches the default one", source::models_dir(&home).display());
        return Ok(());
    }
    let rows: Vec<[String; 4]> = models
        .iter()
        .map(|m| {
            let name = m.path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let (arch, gate) = describe(&m.path);
            [name, format!("{:.1} MB", m.size as f64 / 1e6), arch, gate]
        })
        .collect();
    let header = ["NAME".to_string(), "SIZE".into(), "ARCHITECTURE".into(), format!("GATE ({BACKEND_KIND})")];
    let width = |i: usize| rows.iter().chain([&header]).map(|r| r[i].chars().count()).max().unwrap_or(0);
    let (w0, w1, w2) = (width(0), width(1), width(2));
    for r in [&header].into_iter().chain(&rows) {
        println!("{:<w0$}  {:>w1$}  {:<w2$}  {}", r[0], r[1], r[2], r[3]);
    }
    Ok(())
}

pub fn rm(spec: &str) -> Result<()> {
    let home = source::plumb_home()?;
    let removed = source::remove_cached(spec, &home)?;
    println!("removed {}", removed.display());
    Ok(())
}
