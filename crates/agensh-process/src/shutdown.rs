//! The stop signal of a hub or a node (mini-redis style): one [`ShutdownTrigger`], any
//! number of [`Shutdown`] listeners that can be cloned into every task.

use std::sync::Arc;

use tokio::sync::watch;

/// Fires a shutdown once; every [`Shutdown`] made from it resolves. Dropping the trigger
/// without firing it also shuts down, so a listener can never wait on a signal nobody can send.
#[derive(Debug)]
pub struct ShutdownTrigger {
    tx: watch::Sender<bool>,
}

/// Listens for a shutdown: cheap to clone, checked with [`Shutdown::is_shutdown`] or awaited
/// with [`Shutdown::wait`].
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<bool>,
    /// Keeps the sender of [`Shutdown::never`] alive.
    _keep: Option<Arc<watch::Sender<bool>>>,
}

impl ShutdownTrigger {
    /// A trigger and its first listener.
    pub fn new() -> (ShutdownTrigger, Shutdown) {
        let (tx, rx) = watch::channel(false);
        (ShutdownTrigger { tx }, Shutdown { rx, _keep: None })
    }

    /// Shuts down every listener (again is harmless).
    pub fn fire(&self) {
        self.tx.send_replace(true);
    }

    /// Another listener of this trigger.
    pub fn listener(&self) -> Shutdown {
        Shutdown {
            rx: self.tx.subscribe(),
            _keep: None,
        }
    }
}

impl Shutdown {
    /// A listener that never shuts down (a loop run until its own work ends).
    pub fn never() -> Shutdown {
        let (tx, rx) = watch::channel(false);
        Shutdown {
            rx,
            _keep: Some(Arc::new(tx)),
        }
    }

    /// Whether the shutdown has been fired (or its trigger dropped).
    pub fn is_shutdown(&self) -> bool {
        *self.rx.borrow() || self.rx.has_changed().is_err()
    }

    /// Resolves once the shutdown is fired or its trigger is dropped; at once if it was.
    pub async fn wait(&mut self) {
        loop {
            if *self.rx.borrow_and_update() {
                return;
            }
            if self.rx.changed().await.is_err() {
                return;
            }
        }
    }

    /// [`Shutdown::wait`] on a clone, for `select!` arms and `with_graceful_shutdown`.
    pub fn wait_owned(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut me = self.clone();
        async move { me.wait().await }
    }
}

/// A future that resolves on the first Ctrl-C or (on Unix) SIGTERM after this call: the
/// handlers are installed before it returns, so a signal sent in between is not lost.
pub fn signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt())?;
        let mut terminate = signal(SignalKind::terminate())?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => {}
                _ = terminate.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn fire_wakes_every_listener_and_later_ones_see_it() {
        let (trigger, first) = ShutdownTrigger::new();
        let second = first.clone();
        let waiting = tokio::spawn(second.wait_owned());
        assert!(!first.is_shutdown());
        trigger.fire();
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the listener woke")
            .unwrap();
        assert!(first.is_shutdown());
        let mut late = trigger.listener();
        assert!(late.is_shutdown());
        tokio::time::timeout(Duration::from_secs(5), late.wait())
            .await
            .expect("a late listener returns at once");
    }

    #[tokio::test]
    async fn dropping_the_trigger_shuts_down() {
        let (trigger, mut listener) = ShutdownTrigger::new();
        drop(trigger);
        assert!(listener.is_shutdown());
        tokio::time::timeout(Duration::from_secs(5), listener.wait())
            .await
            .expect("a dropped trigger ends the wait");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn signal_resolves_on_a_sigterm_sent_before_it_is_awaited() {
        let signal = signal().expect("the handlers install");
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        tokio::time::timeout(Duration::from_secs(5), signal)
            .await
            .expect("SIGTERM ended the wait");
    }

    #[tokio::test]
    async fn never_does_not_shut_down() {
        let mut never = Shutdown::never();
        assert!(!never.is_shutdown());
        let waited = tokio::time::timeout(Duration::from_millis(50), never.wait()).await;
        assert!(waited.is_err(), "a never-shutdown listener kept waiting");
    }
}
