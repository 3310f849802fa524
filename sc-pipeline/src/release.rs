//! Large host buffers given back off the critical path. Freeing GBs of host memory is the
//! kernel unmapping and freeing every page (the 16 GB input X of a million cells took about a
//! second on the H100 host), time that the next step would otherwise wait for.

/// Drops `value` on a thread of its own (inline when no thread can be started). Only for data
/// nothing else needs: the memory goes back to the system a moment later than an inline drop.
pub fn drop_in_background<T: Send + 'static>(value: T) {
    // A thread that cannot be started drops its closure, and `value` with it, right here.
    let _ = std::thread::Builder::new()
        .name("release".into())
        .spawn(move || drop(value));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_value_is_dropped() {
        struct Flag(std::sync::mpsc::Sender<()>);
        impl Drop for Flag {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        drop_in_background(Flag(tx));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("dropped on the background thread");
    }
}
