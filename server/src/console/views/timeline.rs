//! A record's timeline: its steps, requests, replays, evidence and operators' actions, in order.

use crate::store::rfc3339_millis as at;
use app::audit::model as audit;
use app::records::model as records;
use chrono::{DateTime, Utc};
use domain::record::RecordStatus;
use domain::recovery::ProviderEvidence;

/// Everything that happened to a record, oldest first: the client's requests, each change of
/// status, step or lease (a failed provider call with its words and duration), what the
/// provider said when an operator asked, and the operators' actions.
pub(crate) fn timeline(
    steps: &[records::StepView],
    requests: &[records::RequestView],
    replays: Option<&records::ReplaysView>,
    audit: &[audit::AuditEntryView],
    evidence: Option<&(ProviderEvidence, DateTime<Utc>)>,
) -> Vec<records::TimelineEntry> {
    let entry = |at: &str, kind, text: String| records::TimelineEntry {
        at: at.to_owned(),
        kind,
        text,
    };
    let mut timeline = Vec::with_capacity(steps.len() + requests.len() + audit.len() + 1);
    timeline.extend(requests.iter().map(|request| {
        let answer = match &request.error_code {
            Some(code) => format!("{} {code}", request.status_code),
            None => request.status_code.to_string(),
        };
        let what = if request.same_request {
            "a request with the key"
        } else {
            "a different request with the key"
        };
        entry(
            &request.at,
            records::TimelineKind::Request,
            format!("{what}, answered {answer}"),
        )
    }));
    timeline.extend(
        replays.map(|replays| entry(&replays.first_at, records::TimelineKind::Request, replays.text())),
    );
    let mut previous: Option<DateTime<Utc>> = None;
    timeline.extend(steps.iter().map(|step| {
        let owner = step
            .lease_owner
            .as_deref()
            .map(|owner| format!(", owner {owner}"))
            .unwrap_or_default();
        // How long the step before took: a provider call's, from the request sent to its answer.
        let this = DateTime::parse_from_rfc3339(&step.at)
            .ok()
            .map(|at| at.with_timezone(&Utc));
        let after = match (previous, this) {
            (Some(before), Some(now)) => format!(
                ", {:.3} s after the step before",
                (now - before).num_milliseconds() as f64 / 1000.0
            ),
            _ => String::new(),
        };
        previous = this.or(previous);
        let moved = format!(
            "{} at step {} (lease version {}{owner}{after})",
            step.status, step.step, step.lease_version
        );
        match (&step.note, step.status) {
            (Some(note), RecordStatus::UnknownRequiresRecovery) => entry(
                &step.at,
                records::TimelineKind::ProviderFailure,
                format!("{moved}: {note}"),
            ),
            (Some(note), _) => entry(
                &step.at,
                records::TimelineKind::ProviderAnswer,
                format!("{moved}: {note}"),
            ),
            (None, _) => entry(&step.at, records::TimelineKind::Step, moved),
        }
    }));
    timeline.extend(evidence.map(|(evidence, seen)| {
        let said = match evidence {
            ProviderEvidence::Charged { charge_id, status } => format!("it has {charge_id}, {status}"),
            ProviderEvidence::NoCharge => "it has nothing under the key".to_owned(),
            ProviderEvidence::Unreachable { problem } => format!("it did not answer: {problem}"),
        };
        entry(
            &at(*seen),
            records::TimelineKind::Evidence,
            format!("the provider, asked for an operator: {said}"),
        )
    }));
    timeline.extend(audit.iter().map(|logged| {
        let reason = logged
            .entry
            .reason
            .as_deref()
            .map(|reason| format!(": \u{201c}{reason}\u{201d}"))
            .unwrap_or_default();
        let details = logged
            .entry
            .details
            .as_deref()
            .map(|details| format!(" ({details})"))
            .unwrap_or_default();
        entry(
            &logged.at,
            records::TimelineKind::Operator,
            format!(
                "{} {}, {}{reason}{details}",
                logged.entry.actor, logged.entry.action, logged.entry.result
            ),
        )
    }));
    // RFC 3339 in UTC with milliseconds sorts as time does; equal times keep their order.
    timeline.sort_by(|a, b| a.at.cmp(&b.at));
    timeline
}
