//! `reports.daily: "08:00"`: at that time of the desk's day, the previous
//! day's report — once. A daemon that was down at that time makes it when
//! it starts (the day's report is due from that moment on); the check
//! "is there one for that day?" and the append at the stream's version
//! make it once across restarts and daemons sharing the log.

use std::sync::Arc;
use std::time::Duration;

use super::{Ask, DAY, Reports, day_of, day_period};

/// Look again at least this often (a clock fixed by `$TINYCODE_NOW`, a
/// suspended machine).
const LOOK_EVERY: Duration = Duration::from_secs(60);

/// Make the daily report at `minute` (minutes after the desk's midnight)
/// every day, until the store closes.
pub async fn run_daily(reports: Arc<Reports>, minute: u32) {
    let offset = reports.offset();
    let mut closing = reports.closing();
    // The day whose report is there: nothing to do until the next moment.
    let mut done = String::new();
    loop {
        if *closing.borrow() {
            return;
        }
        let now = crate::clock::now_unix();
        let Some(period) = day_period(&day_of(now, offset), offset) else {
            return;
        };
        let moment = period.from + i64::from(minute) * 60;
        let day = day_of(period.from - DAY, offset);
        let wait = if now < moment {
            moment - now
        } else if done == day {
            moment + DAY - now
        } else {
            if make(&reports, &day, offset).await {
                done = day;
            }
            // Tried and failed: again within a minute.
            moment + DAY - now
        };
        let wait = Duration::from_secs(wait.max(1) as u64).min(LOOK_EVERY);
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = closing.changed() => {}
        }
    }
}

/// The scheduled report of `day` (made now, or found made); whether it is
/// there.
async fn make(reports: &Reports, day: &str, offset: i64) -> bool {
    let Some(period) = day_period(day, offset) else {
        return false;
    };
    let ask = Ask {
        period,
        day: day.to_string(),
        queue: String::new(),
        scheduled: true,
    };
    match reports.generate(ask).await {
        Ok(info) => {
            tracing::debug!(report = %info.report_id, day, "the daily report is there");
            true
        }
        Err(e) => {
            crate::error_limited!("daily-report", day, error = %e, "cannot make the daily report; trying again");
            false
        }
    }
}
