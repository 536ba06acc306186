//! `apiKeyHelper`: a command that prints a provider's key (a rotating
//! token, a password manager). Its answer is kept for the configured time;
//! one run at a time per provider; a helper that fails or outlives its
//! timeout (its whole process group is killed) fails the request with a
//! clear error.

use std::time::Instant;

use tinycode_model::catalog::KeyHelperSpec;

use super::AuthError;

/// One provider's helper and its last answer.
pub struct Helper {
    pub spec: KeyHelperSpec,
    cached: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl Helper {
    pub fn new(spec: KeyHelperSpec) -> Self {
        Self {
            spec,
            cached: tokio::sync::Mutex::new(None),
        }
    }

    /// The key: the kept one while younger than the ttl, else a new run.
    pub async fn key(&self, provider: &str) -> Result<String, AuthError> {
        let mut cached = self.cached.lock().await;
        if let Some((key, at)) = &*cached
            && at.elapsed() < self.spec.ttl
        {
            return Ok(key.clone());
        }
        let key = run(&self.spec, provider).await?;
        *cached = Some((key.clone(), Instant::now()));
        Ok(key)
    }
}

async fn run(spec: &KeyHelperSpec, provider: &str) -> Result<String, AuthError> {
    let failed = |why: String| AuthError::Helper {
        provider: provider.to_string(),
        command: spec.command.clone(),
        why,
    };
    let child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&spec.command)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("could not start: {e}")))?;
    let group = child.id();
    let output = match tokio::time::timeout(spec.timeout, child.wait_with_output()).await {
        Ok(output) => output.map_err(|e| failed(e.to_string()))?,
        Err(_) => {
            if let Some(pid) = group.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            return Err(failed(format!(
                "did not answer within {}s (apiKeyHelperTimeoutSeconds)",
                spec.timeout.as_secs()
            )));
        }
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let key = stdout.lines().next().unwrap_or_default().trim().to_string();
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or_default();
        // Whatever it printed may hold the key: redacted by value.
        let last = tinycode_model::redact::redact(last, &[key.as_str()]);
        return Err(failed(format!("exited with {}: {last}", output.status)));
    }
    if key.is_empty() {
        return Err(failed("printed no key".into()));
    }
    Ok(key)
}
