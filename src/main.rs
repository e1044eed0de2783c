//! Parse, call the library, exit with the code — nothing else.

fn main() {
    std::process::exit(governed_exec::cli_main());
}
