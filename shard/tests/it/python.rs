//! Agreement with Python's `tarfile` and `zipfile`, the readers datasets are checked with:
//! archives Python writes list exactly as Python lists them, and archives we write read
//! back in Python with identical bytes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use gristmill_shard::{Format, Limits, MemberKind, ShardWriter};
use serde_json::Value;

use crate::util::{MTIME, compress, read_all};

/// The project's venv Python if present, else `python3`; `None` (test skipped) if neither.
fn python() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    let candidates = [venv, PathBuf::from("python3")];
    candidates.into_iter().find(|p| {
        Command::new(p)
            .arg("-c")
            .arg("pass")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

fn run_python(py: &Path, script: &str, arg: &Path) -> Value {
    let out = Command::new(py)
        .arg("-c")
        .arg(script)
        .arg(arg)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Builds archives with tarfile/zipfile: ustar (prefix-split long names), pax (long and
/// unicode names), GNU (long names), gzip, directories, empty files, a 1 MiB member; then
/// prints each archive's names and members' CRC-32s as Python reads them.
const PY_WRITE: &str = r#"
import io, json, os, sys, tarfile, zipfile, zlib

out = sys.argv[1]
blob = bytes((i * 7 + 3) % 251 for i in range(1 << 20))
files = [
    ("a.txt", b"hello"),
    ("empty", b""),
    ("dir/b.bin", blob),
    ("d" * 60 + "/" + "e" * 60 + "/f.txt", b"prefix-split in ustar"),
    ("long/" + "x" * 150 + ".dat", b"long name"),
    ("ünïcødé/ファイル.txt", "héllo".encode()),
    ("sample/0001.jpg", b"\xff\xd8jpeg"),
    ("sample/0001.cls", b"3"),
    ("./dot/slash.txt", b"dot"),
]
dirs = ["dir", "sample", "deep/" + "z" * 120]

def add_tar(tf):
    for d in dirs:
        ti = tarfile.TarInfo(d)
        ti.type = tarfile.DIRTYPE
        ti.mode = 0o755
        ti.mtime = 1700000000
        tf.addfile(ti)
    for name, data in files:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        ti.mtime = 1700000000
        tf.addfile(ti, io.BytesIO(data))

report = {}
def describe_tar(path, mode):
    with tarfile.open(path, mode) as tf:
        report[os.path.basename(path)] = {
            "names": tf.getnames(),
            "crcs": {m.name: zlib.crc32(tf.extractfile(m).read()) for m in tf.getmembers() if m.isfile()},
        }

for fmt, fname in [(tarfile.USTAR_FORMAT, "ustar.tar"), (tarfile.PAX_FORMAT, "pax.tar"), (tarfile.GNU_FORMAT, "gnu.tar")]:
    path = os.path.join(out, fname)
    fs = files if fmt != tarfile.USTAR_FORMAT else [f for f in files if not f[0].startswith("long/")]
    with tarfile.open(path, "w", format=fmt) as tf:
        saved = files[:]
        files[:] = fs
        add_tar(tf)
        files[:] = saved
    describe_tar(path, "r")

path = os.path.join(out, "pax.tgz")
with tarfile.open(path, "w:gz") as tf:
    add_tar(tf)
describe_tar(path, "r:gz")

for method, fname in [(zipfile.ZIP_DEFLATED, "deflated.zip"), (zipfile.ZIP_STORED, "stored.zip")]:
    path = os.path.join(out, fname)
    with zipfile.ZipFile(path, "w", compression=method) as zf:
        for d in dirs:
            zf.writestr(zipfile.ZipInfo(d + "/", (2023, 11, 14, 22, 13, 20)), b"")
        for name, data in files:
            zf.writestr(zipfile.ZipInfo(name, (2023, 11, 14, 22, 13, 20)), data, compress_type=method)
    with zipfile.ZipFile(path) as zf:
        report[fname] = {
            "names": zf.namelist(),
            "crcs": {i.filename: zlib.crc32(zf.read(i)) for i in zf.infolist() if not i.is_dir()},
        }
print(json.dumps(report))
"#;

#[test]
fn listings_equal_pythons_for_archives_python_writes() {
    let Some(py) = python() else {
        eprintln!("no python; skipping");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let report = run_python(&py, PY_WRITE, dir.path());
    let report = report.as_object().unwrap();
    let mut checked = 0;
    for (file, want) in report {
        let bytes = std::fs::read(dir.path().join(file)).unwrap();
        let format = Format::from_name(file).unwrap();
        assert_eq!(Format::from_magic(&bytes), Some(format), "{file}");
        let mut cases = vec![(format, bytes.clone())];
        if format == Format::Tar {
            // The same archive as tar.lz4 (Python has no lz4 writer).
            cases.push((Format::TarLz4, compress(Format::TarLz4, &bytes)));
        }
        for (format, bytes) in cases {
            let got = read_all(format, &bytes, Limits::default())
                .unwrap_or_else(|e| panic!("{file} as {format}: {e}"));
            let names: Vec<&str> = got.iter().map(|(m, _)| m.name.as_str()).collect();
            let want_names: Vec<&str> = want["names"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(names, want_names, "{file} as {format}");
            for (m, data) in &got {
                if m.kind == MemberKind::Dir {
                    assert!(data.is_empty());
                    continue;
                }
                let crc = want["crcs"][&m.name].as_u64().unwrap();
                assert_eq!(u64::from(crc32fast::hash(data)), crc, "{file}: {}", m.name);
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 9);
}

/// Reads every archive in a directory with tarfile/zipfile (lz4 ones were decompressed by
/// the `lz4` tool beforehand) and prints names with CRC-32s and sizes.
const PY_READ: &str = r#"
import json, os, sys, tarfile, zipfile, zlib
report = {}
d = sys.argv[1]
for fname in sorted(os.listdir(d)):
    path = os.path.join(d, fname)
    if fname.endswith(".zip"):
        with zipfile.ZipFile(path) as zf:
            assert zf.testzip() is None
            report[fname] = [[i.filename, zlib.crc32(zf.read(i)), i.file_size, i.date_time[0]] for i in zf.infolist()]
    elif fname.endswith(".tar") or fname.endswith(".tgz"):
        with tarfile.open(path) as tf:
            report[fname] = [[m.name, zlib.crc32(tf.extractfile(m).read()), m.size, m.mtime, m.mode, m.uid, m.type.decode()] for m in tf.getmembers()]
print(json.dumps(report))
"#;

#[test]
fn python_reads_what_we_write_byte_for_byte() {
    let Some(py) = python() else {
        eprintln!("no python; skipping");
        return;
    };
    let blob: Vec<u8> = (0..(3 << 20))
        .map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let long = format!("{}/{}.bin", "l".repeat(120), "m".repeat(130));
    // 100 bytes is the most a ustar name field holds; 101 needs pax.
    let (hundred, hundred_one) = ("h".repeat(100), "i".repeat(101));
    let members: Vec<(&str, &[u8])> = vec![
        ("a.txt", b"hello"),
        ("empty", b""),
        ("blob/0001.bin", &blob),
        (&long, b"long name"),
        ("ünïcødé/ファイル.txt", "héllo".as_bytes()),
        (&hundred, b"100-byte name"),
        (&hundred_one, b"101-byte name"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let lz4_tool = Command::new("lz4").arg("--version").output().is_ok();
    for format in Format::ALL {
        let mut w = ShardWriter::new(format, Vec::new(), MTIME);
        for (name, data) in &members {
            w.append_bytes(name, data).unwrap();
        }
        let bytes = w.finish().unwrap();
        match format {
            Format::TarLz4 if lz4_tool => {
                let src = dir.path().join("lz4-src.tar.lz4");
                std::fs::write(&src, &bytes).unwrap();
                let status = Command::new("lz4")
                    .args(["-d", "-q"])
                    .arg(&src)
                    .arg(dir.path().join("from-lz4.tar"))
                    .status()
                    .unwrap();
                assert!(status.success());
                std::fs::remove_file(src).unwrap();
            }
            Format::TarLz4 => {
                let plain = read_all(Format::TarLz4, &bytes, Limits::default()).unwrap();
                assert_eq!(plain.len(), members.len());
            }
            _ => std::fs::write(
                dir.path().join(format!("ours{}", format.extension())),
                bytes,
            )
            .unwrap(),
        }
    }
    let report = run_python(&py, PY_READ, dir.path());
    let report = report.as_object().unwrap();
    assert_eq!(report.len(), if lz4_tool { 4 } else { 3 });
    let want: BTreeMap<&str, (u64, u64)> = members
        .iter()
        .map(|(n, d)| (*n, (u64::from(crc32fast::hash(d)), d.len() as u64)))
        .collect();
    for (file, rows) in report {
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), members.len(), "{file}");
        for (row, (name, _)) in rows.iter().zip(&members) {
            assert_eq!(row[0].as_str().unwrap(), *name, "{file}");
            let (crc, size) = want[name];
            assert_eq!(row[1].as_u64().unwrap(), crc, "{file}: {name}");
            assert_eq!(row[2].as_u64().unwrap(), size, "{file}: {name}");
            if file.ends_with(".zip") {
                assert_eq!(row[3].as_u64().unwrap(), 2023, "{file}");
            } else {
                assert_eq!(row[3].as_u64().unwrap(), MTIME, "{file}");
                assert_eq!(row[4].as_u64().unwrap(), 0o644, "{file}");
                assert_eq!(row[5].as_u64().unwrap(), 0, "{file}");
                assert_eq!(row[6].as_str().unwrap(), "0", "{file}");
            }
        }
    }
}
