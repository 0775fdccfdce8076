//! Operating a server (book: admin/api.md, admin/commands.md, admin/audit-capture.md,
//! operating/data-folder.md, operating/configuration-variables-and-reload.md,
//! operating/health-and-metrics.md, operating/tap-and-unit-tests.md and
//! operating/packaging-and-systemd.md): the admin API and its security, audit capture,
//! the data folder, variables and reload, health and metrics, tap, config unit tests
//! and packaging.

mod admin;
mod admin_commands;
mod admin_security;
mod audit_capture;
mod data_dir;
mod env_vars;
mod idle;
mod observe;
mod packaging;
mod reload;
mod sighup_during_start;
mod tap;
mod unit_tests;
