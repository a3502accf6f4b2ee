//! JSON for programs: the document's own value when it carries one (`profile`, `memory`,
//! `compare`), else its tables as arrays of row objects keyed by column name, numbers at full
//! precision. Where the value is an object, a `tables` list beside its own keys holds every table
//! as `{name, title, columns, rows}` ([`Document::tables_json`]), so a script finds each table
//! the same way whatever the command; a lone table stays the bare array of its rows.

use std::io::{self, Write};

use serde_json::{Map, Value};

use super::{Document, Renderer};

/// JSON: the document's own value, else one array of row objects (or an object of them keyed by
/// section title when there are several sections); objects gain the `tables` list.
pub struct JsonRenderer;

impl Renderer for JsonRenderer {
    fn render(&self, doc: &Document, out: &mut dyn Write) -> io::Result<()> {
        let mut value = match &doc.json {
            Some(v) => v.clone(),
            None if doc.sections.len() == 1 => doc.sections[0].table.to_json(),
            None => {
                let mut obj = Map::new();
                for (i, s) in doc.sections.iter().enumerate() {
                    let key = s.title.clone().unwrap_or_else(|| format!("table_{i}"));
                    obj.insert(key, s.table.to_json());
                }
                Value::Object(obj)
            }
        };
        if let Value::Object(obj) = &mut value {
            if !doc.sections.is_empty() && !obj.contains_key("tables") {
                obj.insert("tables".to_owned(), doc.tables_json());
            }
        }
        serde_json::to_writer_pretty(&mut *out, &value)?;
        writeln!(out)
    }
}
