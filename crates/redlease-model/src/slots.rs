//! A fixed-capacity list: states are copied millions of times, so they hold no heap data.

use std::ops::{Deref, DerefMut};

/// Up to `N` items stored inline; behaves as a slice of its `len` items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Slots<T, const N: usize> {
    len: u8,
    items: [T; N],
}

impl<T: Copy + Default, const N: usize> Slots<T, N> {
    /// `len` copies of `value` (at most `N`).
    pub fn filled(len: usize, value: T) -> Self {
        let mut items = [T::default(); N];
        let len = len.min(N);
        items[..len].fill(value);
        Slots {
            len: u8::try_from(len).unwrap_or(u8::MAX),
            items,
        }
    }

    /// No items.
    pub fn empty() -> Self {
        Self::filled(0, T::default())
    }

    /// Appends `value`; drops it when full.
    pub fn push(&mut self, value: T) {
        let len = usize::from(self.len);
        if len < N {
            self.items[len] = value;
            self.len += 1;
        }
    }
}

impl<T: Copy + Default, const N: usize> Default for Slots<T, N> {
    fn default() -> Self {
        Self::empty()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a Slots<T, N> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a, T, const N: usize> IntoIterator for &'a mut Slots<T, N> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl<T: Copy + Default, const N: usize> FromIterator<T> for Slots<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut slots = Self::empty();
        for item in iter {
            slots.push(item);
        }
        slots
    }
}

impl<T, const N: usize> Deref for Slots<T, N> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        &self.items[..usize::from(self.len)]
    }
}

impl<T, const N: usize> DerefMut for Slots<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.items[..usize::from(self.len)]
    }
}
