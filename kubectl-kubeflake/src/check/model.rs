//! What `check` reports: findings marked ok, warn or fail, each warn or fail with what to
//! do; the checklist a person reads and the document a script reads; the exit code.

use serde::Serialize;

use crate::error::{EXIT_OK, EXIT_RUNTIME, EXIT_WARNINGS};
use crate::output::Report;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mark {
    Ok,
    Warn,
    Fail,
}

impl Mark {
    fn label(self) -> &'static str {
        match self {
            Mark::Ok => "[ok]  ",
            Mark::Warn => "[warn]",
            Mark::Fail => "[fail]",
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// The group it belongs to ("kubernetes", "operator", "webhook", "sequence shop/orders").
    pub group: String,
    /// What was checked, short ("leader lease").
    pub check: String,
    pub mark: Mark,
    /// What was found.
    pub detail: String,
    /// What to do about a warn or fail (null when ok).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Finding {
    pub fn ok(group: &str, check: &str, detail: impl Into<String>) -> Finding {
        Finding {
            group: group.to_string(),
            check: check.to_string(),
            mark: Mark::Ok,
            detail: detail.into(),
            hint: None,
        }
    }

    pub fn warn(
        group: &str,
        check: &str,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Warn,
            hint: Some(hint.into()),
            ..Finding::ok(group, check, detail)
        }
    }

    pub fn fail(
        group: &str,
        check: &str,
        detail: impl Into<String>,
        hint: impl Into<String>,
    ) -> Finding {
        Finding {
            mark: Mark::Fail,
            hint: Some(hint.into()),
            ..Finding::ok(group, check, detail)
        }
    }
}

/// How many findings of each mark.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub ok: usize,
    pub warn: usize,
    pub fail: usize,
}

/// What `check` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    /// `pre` (before install) or `installed`.
    pub phase: &'static str,
    pub findings: Vec<Finding>,
    pub summary: Summary,
}

impl CheckReport {
    pub fn new(phase: &'static str, findings: Vec<Finding>) -> CheckReport {
        let mut summary = Summary::default();
        for f in &findings {
            match f.mark {
                Mark::Ok => summary.ok += 1,
                Mark::Warn => summary.warn += 1,
                Mark::Fail => summary.fail += 1,
            }
        }
        CheckReport {
            phase,
            findings,
            summary,
        }
    }

    /// 0 when nothing failed (warnings too, unless `strict`: then 4), 1 when a check failed.
    pub fn exit_code(&self, strict: bool) -> i32 {
        if self.summary.fail > 0 {
            EXIT_RUNTIME
        } else if strict && self.summary.warn > 0 {
            EXIT_WARNINGS
        } else {
            EXIT_OK
        }
    }
}

impl Report for CheckReport {
    fn table(&self) -> String {
        let mut out = String::new();
        let mut group: Option<&str> = None;
        for f in &self.findings {
            if group != Some(f.group.as_str()) {
                if group.is_some() {
                    out.push('\n');
                }
                out.push_str(&f.group);
                out.push('\n');
                group = Some(&f.group);
            }
            out.push_str(&format!("  {} {}: {}\n", f.mark.label(), f.check, f.detail));
            if let Some(hint) = &f.hint {
                out.push_str(&format!("         do: {hint}\n"));
            }
        }
        let s = self.summary;
        let verdict = if s.fail > 0 {
            "FAILED"
        } else if s.warn > 0 {
            "passed with warnings"
        } else {
            "passed"
        };
        out.push_str(&format!(
            "\n{verdict}: {} ok, {} warning{}, {} failure{}\n",
            s.ok,
            s.warn,
            if s.warn == 1 { "" } else { "s" },
            s.fail,
            if s.fail == 1 { "" } else { "s" }
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Format;
    use crate::output::render;

    fn report() -> CheckReport {
        CheckReport::new(
            "installed",
            vec![
                Finding::ok("operator", "deployment", "2/2 replicas available"),
                Finding::warn("webhook", "certificate", "expires in 3 days", "rotate it"),
                Finding::ok("webhook", "endpoints", "2 ready"),
            ],
        )
    }

    #[test]
    fn the_checklist_has_one_line_per_check_under_its_group_and_a_do_line_per_warning() {
        let table = report().table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "operator");
        assert_eq!(lines[1], "  [ok]   deployment: 2/2 replicas available");
        assert_eq!(lines[3], "webhook");
        assert_eq!(lines[4], "  [warn] certificate: expires in 3 days");
        assert_eq!(lines[5], "         do: rotate it");
        assert_eq!(lines[6], "  [ok]   endpoints: 2 ready");
        assert_eq!(
            lines.last().copied(),
            Some("passed with warnings: 2 ok, 1 warning, 0 failures")
        );
    }

    #[test]
    fn json_carries_each_finding_with_its_mark_and_hint_and_the_counts() {
        let json: serde_json::Value =
            serde_json::from_str(&render(Format::Json, &report()).unwrap()).unwrap();
        assert_eq!(json["phase"], "installed");
        assert_eq!(json["findings"][1]["mark"], "warn");
        assert_eq!(json["findings"][1]["hint"], "rotate it");
        assert!(json["findings"][0].get("hint").is_none());
        assert_eq!(json["summary"]["warn"], 1);
    }

    #[test]
    fn a_failure_exits_1_warnings_exit_0_or_4_with_strict_and_all_ok_exits_0() {
        assert_eq!(report().exit_code(false), 0);
        assert_eq!(report().exit_code(true), 4);
        let mut findings = report().findings;
        findings.push(Finding::fail(
            "operator",
            "leader lease",
            "stale",
            "restart",
        ));
        let failed = CheckReport::new("installed", findings);
        assert_eq!(failed.exit_code(false), 1);
        assert_eq!(failed.exit_code(true), 1);
        assert!(
            failed
                .table()
                .ends_with("FAILED: 2 ok, 1 warning, 1 failure\n")
        );
        let fine = CheckReport::new("pre", vec![Finding::ok("kubernetes", "version", "v1.35")]);
        assert_eq!(fine.exit_code(true), 0);
    }
}
