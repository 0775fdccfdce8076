//! Records the target triple the SDK is compiled for: the plugin handshake compares the
//! host's with the plugin's.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=MONGOOSE_PLUGIN_TARGET={target}");
    println!("cargo:rerun-if-changed=build.rs");
}
