//! JSON Schemas of the file formats, generated from the serde types so they
//! cannot drift from what the code accepts. A test compares them with the
//! committed files under `schemas/`; `UPDATE_SCHEMAS=1 cargo test
//! --features schema` rewrites them.

use schemars::schema_for;

use crate::approvals::ApprovalsFile;
use crate::pending::{PendingApproval, ToolResult};
use crate::record::Record;
use crate::{Goal, Lease, Manifest, ReceiptBody, Request, Statement};

/// (file name, pretty JSON) of every published schema.
pub fn all() -> Vec<(&'static str, String)> {
    let pretty = |v: schemars::Schema| serde_json::to_string_pretty(&v).unwrap_or_default() + "\n";
    vec![
        ("goal.schema.json", pretty(schema_for!(Goal))),
        ("approvals.schema.json", pretty(schema_for!(ApprovalsFile))),
        ("request.schema.json", pretty(schema_for!(Request))),
        ("lease.schema.json", pretty(schema_for!(Lease))),
        ("manifest.schema.json", pretty(schema_for!(Manifest))),
        (
            "receipt-predicate.schema.json",
            pretty(schema_for!(ReceiptBody)),
        ),
        (
            "receipt-statement.schema.json",
            pretty(schema_for!(Statement)),
        ),
        ("journal-record.schema.json", pretty(schema_for!(Record))),
        ("pending.schema.json", pretty(schema_for!(PendingApproval))),
        (
            "mcp-tool-result.schema.json",
            pretty(schema_for!(ToolResult)),
        ),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn committed_schemas_match_the_code() {
        let dir =
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("schemas");
        let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
        for (name, text) in super::all() {
            let path = dir.join(name);
            if update {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &text).unwrap();
            }
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert_eq!(
                on_disk, text,
                "{name} is stale: run UPDATE_SCHEMAS=1 cargo test --features schema"
            );
        }
    }
}
