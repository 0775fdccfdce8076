//! `cargo xtask`: project automation.
fn main() {
    eprintln!("usage: cargo xtask <bench|fuzz>");
}
