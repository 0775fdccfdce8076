//! A plugin file is checked before anything of it is mapped, and loaded from a private
//! copy.
//!
//! `dlopen` maps a shared library's loadable segments straight from its file. A file
//! cut short inside one of them (a copy that did not finish, a full disk) faults with
//! SIGBUS when the dynamic loader touches the missing pages: the host died with exit 135
//! and no message. A file overwritten in place (`cp new.so plugins/x.so`) changes the
//! pages of a running server under its feet. So the host reads the file once, checks
//! that its program headers and every loadable segment lie within it, writes those very
//! bytes to a private copy (a temporary file, unlinked as soon as it is loaded: the
//! mapping keeps its pages) and loads the copy. Replacing the plugin file on disk then
//! affects the next start only.

use std::io::Write;
use std::path::Path;

use object::elf::{FileHeader64, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;
use tracing::warn;

use crate::host::PluginError;

/// The size of a 64-bit ELF file header.
const ELF_HEADER_BYTES: usize = 64;

/// Refuses `bytes` (the content of `path`) unless it is a 64-bit ELF file whose
/// program headers and loadable segments all lie within it.
pub(crate) fn check(path: &Path, bytes: &[u8]) -> Result<(), PluginError> {
    let length = bytes.len();
    let cut_short = |end: u64| {
        PluginError::Refused(format!(
            "plugin {} is cut short: it has {length} bytes and its loadable parts end at byte {end}; \
             it was not copied or built completely: copy it again, or rebuild it (cargo xtask plugins)",
            path.display()
        ))
    };
    if length < ELF_HEADER_BYTES {
        return Err(if bytes.starts_with(b"\x7fELF") {
            cut_short(ELF_HEADER_BYTES as u64)
        } else {
            not_a_library(path, "it has no ELF header")
        });
    }
    let header = FileHeader64::<Endianness>::parse(bytes)
        .map_err(|error| not_a_library(path, &error.to_string()))?;
    let endian = header
        .endian()
        .map_err(|error| not_a_library(path, &error.to_string()))?;
    let table_end = header
        .e_phoff(endian)
        .saturating_add(u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian)));
    let programs = header
        .program_headers(endian, bytes)
        .map_err(|_| cut_short(table_end))?;
    for program in programs {
        if program.p_type(endian) != PT_LOAD {
            continue;
        }
        let end = program
            .p_offset(endian)
            .saturating_add(program.p_filesz(endian));
        if end > length as u64 {
            return Err(cut_short(end));
        }
    }
    Ok(())
}

fn not_a_library(path: &Path, why: &str) -> PluginError {
    PluginError::Refused(format!(
        "{} is not a shared library of this machine ({why}): remove it from the plugin folder, \
         or rebuild it (cargo xtask plugins)",
        path.display()
    ))
}

/// Loads the plugin at `path` from a checked private copy (see the module docs). When
/// no copy can be loaded (a temporary folder mounted `noexec`), the file itself is
/// loaded, with a WARN that replacing it on disk may then crash the server.
pub(crate) fn load_private_copy(path: &Path) -> Result<libloading::Library, PluginError> {
    let open_error = |reason: String| PluginError::Open {
        path: path.to_path_buf(),
        reason,
    };
    let bytes = std::fs::read(path).map_err(|error| open_error(error.to_string()))?;
    check(path, &bytes)?;
    let copied = (|| {
        let mut copy = tempfile::Builder::new()
            .prefix("mongoose-plugin-")
            .suffix(".so")
            .tempfile()?;
        copy.write_all(&bytes)?;
        copy.flush()?;
        // SAFETY: loading a library runs its initialisers: a plugin is code the
        // operator chose to run (it is in the configured plugin folder); the copy holds
        // the bytes just checked.
        let library = unsafe { libloading::Library::new(copy.path()) }
            .map_err(|error| std::io::Error::other(error.to_string()))?;
        // the copy is unlinked here; the loaded mapping keeps its pages
        drop(copy);
        Ok::<_, std::io::Error>(library)
    })();
    match copied {
        Ok(library) => Ok(library),
        Err(copy_error) => {
            // SAFETY: as above, on the file itself (checked: it was the same bytes when
            // read; a file changed since is the operator's doing).
            let library = unsafe { libloading::Library::new(path) }
                .map_err(|error| open_error(error.to_string()))?;
            warn!(
                plugin = %path.display(),
                error = %copy_error,
                "the plugin was loaded in place, not from a private copy (set TMPDIR to a folder that allows \
                 executables): replacing its file while the server runs may crash the server"
            );
            Ok(library)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_without_an_elf_header_is_not_a_library() {
        let error = check(Path::new("x.so"), b"hello").expect_err("refused");
        assert!(
            error.to_string().contains("not a shared library"),
            "{error}"
        );
    }

    #[test]
    fn an_elf_header_cut_short_is_cut_short() {
        let error = check(Path::new("x.so"), b"\x7fELF\x02\x01\x01").expect_err("refused");
        assert!(error.to_string().contains("cut short"), "{error}");
    }
}
