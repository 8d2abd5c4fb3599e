//! The passes the workers run through the engine: recovery of records whose outcome is
//! unknown or whose owner died (the same reconciler a client's retry runs), settlement of
//! authorised payments, and the watch over released payments for a charge that arrives after
//! all.

use super::PaymentsEngine;
use super::answer::Answer;
use super::owner::{Charging, Owned, Owner};
use crate::store::StoreError;
use domain::api_error::ApiError;
use domain::decision::{Decision, decide};
use domain::payment::new_event_id;
use domain::record::ProgressStep;
use domain::representation::{ApiVersion, PaymentView};
use domain::scope::Scope;
use domain::tenant::TenantId;
use serde_json::json;
use std::time::Duration;

/// Charges found under payments an operator had released: money moved for a payment Idem
/// declined.
const LATE_CHARGES: &str = "idempotency_released_payment_charged_total";

/// Makes the late-charge counter exist (at 0) from the first scrape, so that the first late
/// charge is an increase an alert sees, not a new series.
pub fn register_metrics() {
    metrics::counter!(LATE_CHARGES).increment(0);
}

impl PaymentsEngine {
    /// Resolves one record against the provider if it still needs it (an unknown outcome due
    /// for a look, or a dead owner's record); `None` when there was nothing to do.
    pub async fn recover(&self, scope: &Scope) -> Option<Answer> {
        let found = match self.records.load_record(scope).await {
            Ok(Some(found)) => found,
            Ok(None) => return None,
            Err(error) => {
                error.as_api_error("recovery read");
                return None;
            }
        };
        let lease_version = match decide(&found.record, &found.record.request_fingerprint, found.now) {
            Decision::Recover { lease_version }
            | Decision::TakeOver {
                lease_version,
                resume_from: ProgressStep::ProviderRequestSent,
            } => lease_version,
            _ => return None,
        };
        let owned = self
            .take_over_and_resume(scope, &found, lease_version, None, Charging::AskFirst)
            .await;
        Some(self.answered(scope, owned, Some(found.record.expires_at)).await)
    }

    /// A payment made without a key whose provider answer was lost: ask the provider by its
    /// key and settle it (the settlement applies only while it is still PROCESSING).
    pub async fn recover_unkeyed(&self, tenant_id: &TenantId, payment: &PaymentView) -> Answer {
        match self
            .execute_payment(
                Owner::Unkeyed,
                tenant_id,
                payment,
                ApiVersion::V2,
                Charging::AskFirst,
            )
            .await
        {
            Owned::Answered(answer) => answer,
            // Without a record there is no lease to lose.
            Owned::FencedOut => Answer::error(ApiError::Internal, None),
        }
    }

    /// One settlement pass: authorised payments not checked for `recheck_after` are looked up
    /// at the provider; those it reports settled become SETTLED with their PaymentSettled
    /// event (once: the update is conditional on PENDING). Returns how many settled.
    pub async fn settle_pending(&self, recheck_after: Duration, limit: i64) -> usize {
        let listed = self.payments.take_payments_to_settle(recheck_after, limit).await;
        let Some(ids) = payments_listed(listed, "settlement") else {
            return 0;
        };
        let mut settled = 0;
        for payment_id in ids {
            let charge = match self.provider.find_charge(&payment_id).await {
                Ok(Some(charge)) if charge.settled => charge,
                Ok(_) => continue,
                Err(error) => {
                    tracing::warn!(%error, %payment_id, "settlement: provider look-up failed; later");
                    continue;
                }
            };
            let event_id = new_event_id();
            let payload = json!({
                "eventId": event_id,
                "type": "PaymentSettled",
                "paymentId": payment_id,
                "providerChargeId": charge.charge_id,
            })
            .to_string();
            match self
                .payments
                .settle_payment(&payment_id, &event_id, &payload)
                .await
            {
                Ok(true) => settled += 1,
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, %payment_id, "settlement: not recorded; later"),
            }
        }
        if settled > 0 {
            tracing::info!(settled, "settlement pass");
        }
        settled
    }

    /// Asks the provider again about payments released in the last `watch`: a charge found
    /// under a released payment's key means money moved for a payment Idem declined (the
    /// provider took the request after Idem's call gave up). It is kept on the payment,
    /// counted and logged as an error, for an operator to refund. Returns how many were found.
    pub async fn watch_released(&self, watch: Duration, recheck_after: Duration, limit: i64) -> usize {
        let listed = self
            .payments
            .take_released_payments_to_watch(watch, recheck_after, limit)
            .await;
        let Some(ids) = payments_listed(listed, "release watch") else {
            return 0;
        };
        let mut charged = 0;
        for payment_id in ids {
            match self.provider.find_charge(&payment_id).await {
                Ok(Some(charge)) => match self
                    .payments
                    .note_late_charge(&payment_id, &charge.charge_id)
                    .await
                {
                    Ok(true) => {
                        charged += 1;
                        metrics::counter!(LATE_CHARGES).increment(1);
                        tracing::error!(
                            %payment_id,
                            charge_id = %charge.charge_id,
                            "a payment released as not charged was charged after all: refund it"
                        );
                    }
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, %payment_id, "release watch: not recorded; later"),
                },
                Ok(None) => {}
                Err(error) => {
                    tracing::warn!(%error, %payment_id, "release watch: provider look-up failed; later")
                }
            }
        }
        charged
    }

    /// create_payment's lease: how long a payment made without a key may stay PROCESSING
    /// before recovery asks about it.
    pub fn lease(&self) -> Duration {
        self.settings.create_payment.lease
    }
}

/// The payments a pass takes, or `None` (logged) when the store cannot list them: the pass
/// ends, and the next one tries again.
fn payments_listed(listed: Result<Vec<String>, StoreError>, pass: &str) -> Option<Vec<String>> {
    listed
        .inspect_err(|error| tracing::warn!(%error, pass, "cannot list payments"))
        .ok()
}
