//! Embeds the console's built assets (`dist/`, which `npm run build` in
//! `app/` writes) into the binary, with their precompressed `.gz` and `.br`
//! twins. Without `dist/` the binary is built all the same and serves a
//! page saying how to build the console: `cargo build` never runs npm
//! (docs/decisions/2026-12-04-console-assets-embedded-at-build.md).

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let dist = manifest.join("dist");
    let mut files = Vec::new();
    if dist.join("index.html").is_file() {
        println!("cargo:rerun-if-changed={}", dist.display());
        collect(&dist, &mut files);
    } else {
        // Cargo would run again on every build for a path that does not
        // exist: the crate's folder instead, where `dist/` will appear.
        println!("cargo:rerun-if-changed={}", manifest.display());
    }
    files.sort();
    let mut out = String::from("pub static ASSETS: &[Asset] = &[\n");
    for file in &files {
        let name = file.to_string_lossy();
        if name.ends_with(".gz") || name.ends_with(".br") {
            continue;
        }
        let body = std::fs::read(file).expect("readable asset");
        let path = format!(
            "/{}",
            file.strip_prefix(&dist)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        );
        let twin = |ext: &str| {
            let twin = PathBuf::from(format!("{name}.{ext}"));
            if twin.is_file() {
                format!("Some(include_bytes!({:?}))", twin.display().to_string())
            } else {
                "None".to_string()
            }
        };
        writeln!(
            out,
            "    Asset {{ path: {path:?}, content_type: {:?}, etag: \"\\\"{:016x}\\\"\", body: include_bytes!({:?}), gzip: {}, brotli: {} }},",
            content_type(file),
            fnv1a(&body),
            file.display().to_string(),
            twin("gz"),
            twin("br"),
        )
        .unwrap();
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("assets.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dist") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else {
            files.push(path);
        }
    }
}

/// The ETag: a hash of the content, the same in every copy of a binary.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn content_type(path: &Path) -> &'static str {
    match path.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" => "text/html; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "json" => "application/json",
        "txt" => "text/plain; charset=utf-8",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}
