//! Receipts: the in-toto Statement v1 whose predicate is the receipt body,
//! signed by the runner key as a DSSE envelope.

use std::collections::BTreeMap;
use std::path::Path;

use ed25519_dalek::SigningKey;

use crate::sign;
use governed_model::{
    parse_json, Envelope, Product, ReceiptBody, Statement, Subject, DSSE_PAYLOAD_TYPE,
    PREDICATE_TYPE, STATEMENT_TYPE,
};
/// Hash every product path after the process ended. A path that is not a
/// regular file (or escapes the workspace through a symlink) is `missing`.
pub fn products(workspace: &Path, paths: &[String]) -> Vec<Product> {
    paths
        .iter()
        .map(
            |rel| match crate::products::hash_workspace_file(workspace, rel) {
                Some((size, sha256)) => Product {
                    path: rel.clone(),
                    exists: true,
                    size: Some(size),
                    sha256: Some(sha256),
                },
                None => Product {
                    path: rel.clone(),
                    exists: false,
                    size: None,
                    sha256: None,
                },
            },
        )
        .collect()
}

pub fn statement(body: ReceiptBody) -> Statement {
    let digest = |h: &str| BTreeMap::from([("sha256".to_string(), h.to_string())]);
    let mut subject: Vec<Subject> = body
        .products
        .iter()
        .filter_map(|p| {
            p.sha256.as_ref().map(|h| Subject {
                name: p.path.clone(),
                digest: digest(h),
            })
        })
        .collect();
    subject.push(Subject {
        name: "governed-exec:stdout".into(),
        digest: digest(&body.streams.stdout.sha256),
    });
    subject.push(Subject {
        name: "governed-exec:stderr".into(),
        digest: digest(&body.streams.stderr.sha256),
    });
    Statement {
        type_: STATEMENT_TYPE.into(),
        subject,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: body,
    }
}

/// The signed envelope and the SHA-256 of its payload.
pub fn seal(stmt: &Statement, key: Option<&SigningKey>) -> (Envelope, String) {
    let payload = serde_json::to_vec(stmt).unwrap_or_default();
    let digest = sign::sha256_hex(&payload);
    (
        sign::sign_envelope(key, DSSE_PAYLOAD_TYPE, &payload),
        digest,
    )
}

/// Size bound of a receipt file (kept output is bounded per stream).
pub(crate) const MAX_RECEIPT_BYTES: u64 = 64 * 1024 * 1024;

/// Why a receipt file could not be read (`receipt show`: a usage error).
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("receipt {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] governed_model::ParseError),
    #[error("receipt payload is not valid base64")]
    Base64,
}

pub fn read_envelope(path: &Path) -> Result<Envelope, ReceiptError> {
    let bytes = governed_sys::safe_io::read_bounded(path, MAX_RECEIPT_BYTES).map_err(|source| {
        ReceiptError::Read {
            path: path.display().to_string(),
            source,
        }
    })?;
    Ok(parse_json(&format!("receipt {}", path.display()), &bytes)?)
}

/// Decode the statement without checking the signature (`receipt show`).
pub fn decode_statement(env: &Envelope) -> Result<Statement, ReceiptError> {
    let payload = sign::b64_decode(&env.payload).ok_or(ReceiptError::Base64)?;
    Ok(parse_json("receipt statement", &payload)?)
}
