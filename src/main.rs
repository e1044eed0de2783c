//! Parse, run one command, exit with its code — nothing else.

#![forbid(unsafe_code)]

mod cli;

fn main() {
    std::process::exit(cli::main());
}
