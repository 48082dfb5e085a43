//! A tiny spin lock that never allocates, never parks and can be reset after `fork`.
//!
//! Allocation hooks cannot use locks that allocate while held (the reason 0.3.0 dropped
//! `dashmap` from its hot path) and must survive `fork()` in a child whose lock owner no longer
//! exists. This lock is a single atomic flag: `lock` spins with back-off and yields to the
//! scheduler when contended, `force_unlock` lets the fork handlers release what the prepare
//! handler took. It guards only short critical sections on the *sampled* paths, never the
//! unsampled allocate/free paths.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// A mutual-exclusion lock built on one atomic flag, and a count of the threads waiting for it
/// (so that a holder that takes it again and again, a report reading a table in slices, can let
/// them in between: [`SpinMutex::hand_over`]; the lock is not fair otherwise).
pub(crate) struct SpinMutex<T> {
    locked: AtomicBool,
    waiting: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is serialised by `locked` (acquire on lock, release on unlock), so the
// lock can be shared between threads whenever the protected value may be sent between them.
unsafe impl<T: Send> Sync for SpinMutex<T> {}
// SAFETY: moving the lock moves the value; no thread-affine state is kept.
unsafe impl<T: Send> Send for SpinMutex<T> {}

impl<T> SpinMutex<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            waiting: AtomicU32::new(0),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the lock, spinning (then yielding) while another thread holds it. A thread that
    /// has to wait counts itself among the waiters until it has the lock (no cost when the
    /// lock is free).
    pub(crate) fn lock(&self) -> SpinGuard<'_, T> {
        if self.take() {
            return SpinGuard { lock: self };
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.lock_contended();
        self.waiting.fetch_sub(1, Ordering::Relaxed);
        SpinGuard { lock: self }
    }

    /// One attempt at the lock.
    #[inline(always)]
    fn take(&self) -> bool {
        !self.locked.load(Ordering::Relaxed)
            && self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    /// Spins (then yields) until the lock is taken.
    #[cold]
    fn lock_contended(&self) {
        let mut spins = 0u32;
        loop {
            if self.take() {
                return;
            }
            spins = spins.saturating_add(1);
            // Under a seccomp filter `sched_yield` may be punished: spin on.
            if spins < 64 || crate::sys::seccomp::restricted_here() {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }

    /// For a holder about to take the lock again at once (the lock is free when this is
    /// called): waits, at most about `max_spins` spins, while threads wait for the lock and
    /// none of them has taken it, so that they are not left out by the next taking.
    pub(crate) fn hand_over(&self, max_spins: u32) {
        for _ in 0..max_spins {
            if self.waiting.load(Ordering::Relaxed) == 0 {
                return;
            }
            if self.locked.load(Ordering::Relaxed) {
                // A waiter has it: wait for it to be done, then let the next one in.
                while self.locked.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Takes the lock without waiting for it.
    pub(crate) fn try_lock(&self) -> Option<SpinGuard<'_, T>> {
        self.locked
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| SpinGuard { lock: self })
    }

    /// Takes the lock and leaves it held without a guard (the `fork` prepare handler).
    pub(crate) fn lock_for_fork(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken by [`SpinMutex::lock_for_fork`], in the parent or the child.
    pub(crate) fn force_unlock(&self) {
        self.locked.store(false, Ordering::Release);
    }
}

/// Holds a [`SpinMutex`] until dropped.
pub(crate) struct SpinGuard<'a, T> {
    lock: &'a SpinMutex<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while `locked` is held by this thread, so no other
        // reference to the value is live.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; the guard is borrowed mutably, so this is the only reference.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

impl<T> std::fmt::Debug for SpinMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpinMutex").field("locked", &self.locked.load(Ordering::Relaxed)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn excludes_concurrent_writers() {
        let m = Arc::new(SpinMutex::new(0u64));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let m = Arc::clone(&m);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*m.lock(), 40_000);
    }

    #[test]
    fn try_lock_fails_while_held_and_fork_unlock_releases() {
        let m = SpinMutex::new(1);
        let g = m.lock();
        assert!(m.try_lock().is_none());
        drop(g);
        m.lock_for_fork();
        assert!(m.try_lock().is_none());
        m.force_unlock();
        assert!(m.try_lock().is_some());
    }
}
