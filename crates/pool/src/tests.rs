use super::*;
use proptest::prelude::*;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Conn {
    Free,
    Reading,
    Writing,
    Idle,
}

impl State for Conn {
    const COUNT: usize = 4;
    fn index(self) -> usize {
        self as usize
    }
}

const ALL: [Conn; 4] = [Conn::Free, Conn::Reading, Conn::Writing, Conn::Idle];

/// Checks every list both ways: forward links, backward links, head, tail,
/// count and each slot's state agree, and every slot is in exactly one list.
fn check_links<T>(pool: &Pool<Conn, T>) {
    let mut seen = vec![false; pool.capacity()];
    for state in ALL {
        let list = pool.lists[state.index()];
        let mut prev = NIL;
        let mut at = list.head;
        let mut count = 0;
        while at != NIL {
            let link = pool.links[at as usize];
            assert_eq!(link.state, state, "slot {at} is in the wrong list");
            assert_eq!(link.prev, prev, "slot {at} has a wrong back link");
            assert!(!seen[at as usize], "slot {at} is in two lists");
            seen[at as usize] = true;
            prev = at;
            at = link.next;
            count += 1;
        }
        assert_eq!(list.tail, prev, "{state:?} has a wrong tail");
        assert_eq!(list.count, count, "{state:?} has a wrong count");
    }
    assert!(seen.iter().all(|&s| s), "a slot is in no list");
}

fn ids<T>(pool: &Pool<Conn, T>, state: Conn) -> Vec<u32> {
    pool.iter(state).map(|(slot, _)| slot.0).collect()
}

#[test]
fn new_puts_every_slot_in_the_initial_state_in_slot_order() {
    let pool: Pool<Conn, usize> = Pool::new(5, Conn::Free, 7, |slot| slot.index() * 10);
    check_links(&pool);
    assert_eq!(pool.capacity(), 5);
    assert_eq!(pool.count(Conn::Free), 5);
    assert_eq!(pool.count(Conn::Reading), 0);
    assert_eq!(ids(&pool, Conn::Free), [0, 1, 2, 3, 4]);
    assert_eq!(pool.oldest(Conn::Free), Some(SlotId(0)));
    assert_eq!(pool.oldest(Conn::Idle), None);
    for (slot, entered) in pool.iter(Conn::Free) {
        assert_eq!(entered, 7);
        assert_eq!(pool.entered(slot), 7);
        assert_eq!(pool.state(slot), Conn::Free);
        assert_eq!(pool[slot], slot.index() * 10);
    }
}

#[test]
fn empty_pool_has_nothing_to_take() {
    let mut pool: Pool<Conn, ()> = Pool::new(0, Conn::Free, 0, |_| ());
    check_links(&pool);
    assert_eq!(pool.capacity(), 0);
    assert_eq!(pool.count(Conn::Free), 0);
    assert_eq!(pool.oldest(Conn::Free), None);
    assert_eq!(pool.take_oldest(Conn::Free, Conn::Reading, 1), None);
    assert_eq!(pool.iter(Conn::Free).next(), None);
}

#[test]
fn take_oldest_allocates_free_slots_in_order_until_none_is_left() {
    let mut pool: Pool<Conn, ()> = Pool::new(3, Conn::Free, 0, |_| ());
    let taken: Vec<_> = (1..=3)
        .map(|now| pool.take_oldest(Conn::Free, Conn::Reading, now).unwrap())
        .collect();
    assert_eq!(taken, [SlotId(0), SlotId(1), SlotId(2)]);
    assert_eq!(pool.take_oldest(Conn::Free, Conn::Reading, 4), None);
    assert_eq!(pool.count(Conn::Free), 0);
    assert_eq!(pool.count(Conn::Reading), 3);
    assert_eq!(pool.entered(SlotId(1)), 2);
    check_links(&pool);

    // A freed slot goes to the back of the free list and is the next taken.
    pool.set_state(SlotId(1), Conn::Reading, Conn::Free, 5);
    assert_eq!(pool.take_oldest(Conn::Free, Conn::Idle, 6), Some(SlotId(1)));
    assert_eq!(pool.state(SlotId(1)), Conn::Idle);
    check_links(&pool);
}

#[test]
fn set_state_appends_at_the_tail_so_the_head_is_the_oldest() {
    let mut pool: Pool<Conn, ()> = Pool::new(4, Conn::Free, 0, |_| ());
    pool.set_state(SlotId(2), Conn::Free, Conn::Idle, 10);
    pool.set_state(SlotId(0), Conn::Free, Conn::Idle, 11);
    pool.set_state(SlotId(3), Conn::Free, Conn::Idle, 12);
    assert_eq!(ids(&pool, Conn::Idle), [2, 0, 3]);
    assert_eq!(ids(&pool, Conn::Free), [1]);
    assert_eq!(pool.oldest(Conn::Idle), Some(SlotId(2)));

    // Moving the middle one out keeps the others in order.
    pool.set_state(SlotId(0), Conn::Idle, Conn::Writing, 13);
    assert_eq!(ids(&pool, Conn::Idle), [2, 3]);
    assert_eq!(pool.state(SlotId(0)), Conn::Writing);
    assert_eq!(pool.entered(SlotId(0)), 13);
    check_links(&pool);
}

#[test]
fn touch_restamps_and_moves_to_the_tail_of_the_same_state() {
    let mut pool: Pool<Conn, ()> = Pool::new(3, Conn::Reading, 0, |_| ());
    pool.touch(SlotId(0), 5);
    assert_eq!(ids(&pool, Conn::Reading), [1, 2, 0]);
    assert_eq!(pool.entered(SlotId(0)), 5);
    assert_eq!(pool.state(SlotId(0)), Conn::Reading);

    // Touching the tail keeps it the tail but re-stamps it.
    pool.touch(SlotId(0), 6);
    assert_eq!(ids(&pool, Conn::Reading), [1, 2, 0]);
    assert_eq!(pool.entered(SlotId(0)), 6);
    check_links(&pool);
}

#[test]
fn set_state_to_the_same_state_is_a_touch() {
    let mut pool: Pool<Conn, ()> = Pool::new(2, Conn::Idle, 0, |_| ());
    pool.set_state(SlotId(0), Conn::Idle, Conn::Idle, 4);
    assert_eq!(ids(&pool, Conn::Idle), [1, 0]);
    assert_eq!(pool.entered(SlotId(0)), 4);
    assert_eq!(pool.count(Conn::Idle), 2);
    check_links(&pool);
}

#[test]
fn timeout_sweep_closes_expired_slots_and_stops_at_the_first_unexpired() {
    let mut pool: Pool<Conn, ()> = Pool::new(4, Conn::Free, 0, |_| ());
    for now in [10, 20, 30, 40] {
        let _ = pool.take_oldest(Conn::Free, Conn::Reading, now).unwrap();
    }
    // At 45 with a timeout of 25, slots that entered at 10 and 20 have
    // expired (elapsed 35 and 25); 30 has not (elapsed 15).
    let mut closed = Vec::new();
    while let Some(slot) = pool.oldest_expired(Conn::Reading, 45, 25) {
        pool.set_state(slot, Conn::Reading, Conn::Free, 45);
        closed.push(slot.0);
    }
    assert_eq!(closed, [0, 1]);
    assert_eq!(ids(&pool, Conn::Reading), [2, 3]);
    assert_eq!(ids(&pool, Conn::Free), [0, 1]);
    check_links(&pool);
}

#[test]
fn oldest_expired_does_not_underflow_when_now_is_before_the_timeout() {
    let pool: Pool<Conn, ()> = Pool::new(1, Conn::Reading, 0, |_| ());
    assert_eq!(pool.oldest_expired(Conn::Reading, 5, 10), None);
    assert_eq!(pool.oldest_expired(Conn::Reading, 10, 10), Some(SlotId(0)));
    assert_eq!(pool.oldest_expired(Conn::Idle, 100, 0), None);
}

#[test]
fn iter_yields_oldest_first_with_entry_times_and_can_stop_early() {
    let mut pool: Pool<Conn, ()> = Pool::new(4, Conn::Free, 0, |_| ());
    for (slot, now) in [(3, 1), (1, 2), (2, 8)] {
        pool.set_state(SlotId(slot), Conn::Free, Conn::Idle, now);
    }
    let all: Vec<_> = pool.iter(Conn::Idle).collect();
    assert_eq!(all, [(SlotId(3), 1), (SlotId(1), 2), (SlotId(2), 8)]);
    assert_eq!(pool.iter(Conn::Idle).len(), 3);
    let expired: Vec<_> = pool
        .iter(Conn::Idle)
        .take_while(|&(_, entered)| entered <= 5)
        .map(|(slot, _)| slot)
        .collect();
    assert_eq!(expired, [SlotId(3), SlotId(1)]);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "not in the state the caller said")]
fn set_state_with_a_wrong_from_panics_in_debug_builds() {
    let mut pool: Pool<Conn, ()> = Pool::new(1, Conn::Free, 0, |_| ());
    pool.set_state(SlotId(0), Conn::Idle, Conn::Reading, 1);
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "the clock went backwards")]
fn a_clock_going_backwards_panics_in_debug_builds() {
    let mut pool: Pool<Conn, ()> = Pool::new(2, Conn::Free, 0, |_| ());
    pool.set_state(SlotId(0), Conn::Free, Conn::Idle, 10);
    pool.set_state(SlotId(1), Conn::Free, Conn::Idle, 9);
}

#[test]
fn data_is_reachable_and_mutable_through_its_slot() {
    let mut pool: Pool<Conn, Vec<u8>> = Pool::new(2, Conn::Free, 0, |_| Vec::new());
    let slot = pool.take_oldest(Conn::Free, Conn::Reading, 1).unwrap();
    pool.get_mut(slot).extend_from_slice(b"GET");
    pool[slot].push(b' ');
    assert_eq!(pool.get(slot), b"GET ");
    // Moving between states leaves the data alone.
    pool.set_state(slot, Conn::Reading, Conn::Free, 2);
    assert_eq!(pool[slot], b"GET ");
    assert!(pool[SlotId(1)].is_empty());
}

#[test]
#[should_panic]
fn a_slot_id_past_the_capacity_panics() {
    let small: Pool<Conn, ()> = Pool::new(1, Conn::Free, 0, |_| ());
    let _ = small.state(SlotId(1));
}

/// One step of the property test. Slots are chosen by index modulo the
/// capacity so that every generated step is valid.
#[derive(Clone, Debug)]
enum Op {
    Touch { slot: usize },
    SetState { slot: usize, to: Conn },
    TakeOldest { from: Conn, to: Conn },
}

fn conn() -> impl Strategy<Value = Conn> {
    prop::sample::select(ALL.to_vec())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        any::<usize>().prop_map(|slot| Op::Touch { slot }),
        (any::<usize>(), conn()).prop_map(|(slot, to)| Op::SetState { slot, to }),
        (conn(), conn()).prop_map(|(from, to)| Op::TakeOldest { from, to }),
    ]
}

/// The obvious implementation: a queue of slot indices per state, and each
/// slot's state and entry time.
struct Model {
    queues: Vec<VecDeque<usize>>,
    slots: Vec<(Conn, u64)>,
}

impl Model {
    fn new(capacity: usize) -> Self {
        let mut queues = vec![VecDeque::new(); Conn::COUNT];
        queues[Conn::Free.index()].extend(0..capacity);
        Model {
            queues,
            slots: vec![(Conn::Free, 0); capacity],
        }
    }

    fn move_to(&mut self, slot: usize, to: Conn, now: u64) {
        let from = self.slots[slot].0;
        let queue = &mut self.queues[from.index()];
        let at = queue.iter().position(|&s| s == slot).unwrap();
        queue.remove(at);
        self.queues[to.index()].push_back(slot);
        self.slots[slot] = (to, now);
    }
}

proptest! {
    #[test]
    fn pool_behaves_like_a_queue_per_state(
        capacity in 1usize..12,
        steps in prop::collection::vec((op(), 0u64..3), 0..200),
    ) {
        let mut pool: Pool<Conn, usize> = Pool::new(capacity, Conn::Free, 0, |slot| slot.index());
        let mut model = Model::new(capacity);
        let mut now = 0;
        for (op, tick) in steps {
            // Time only moves forward, sometimes not at all, as a coarse
            // clock does.
            now += tick;
            match op {
                Op::Touch { slot } => {
                    let slot = slot % capacity;
                    pool.touch(SlotId(slot as u32), now);
                    model.move_to(slot, model.slots[slot].0, now);
                }
                Op::SetState { slot, to } => {
                    let slot = slot % capacity;
                    pool.set_state(SlotId(slot as u32), model.slots[slot].0, to, now);
                    model.move_to(slot, to, now);
                }
                Op::TakeOldest { from, to } => {
                    let taken = pool.take_oldest(from, to, now);
                    let expected = model.queues[from.index()].front().copied();
                    prop_assert_eq!(taken.map(SlotId::index), expected);
                    if let Some(slot) = expected {
                        model.move_to(slot, to, now);
                    }
                }
            }

            check_links(&pool);
            for state in ALL {
                let queue = &model.queues[state.index()];
                prop_assert_eq!(pool.count(state), queue.len());
                prop_assert_eq!(pool.oldest(state).map(SlotId::index), queue.front().copied());
                let listed: VecDeque<_> = pool.iter(state).map(|(slot, _)| slot.index()).collect();
                prop_assert_eq!(&listed, queue);
                // Oldest first means entry times never decrease along a list.
                let times: Vec<_> = pool.iter(state).map(|(_, entered)| entered).collect();
                prop_assert!(times.windows(2).all(|w| w[0] <= w[1]));
            }
            for (slot, &(state, entered)) in model.slots.iter().enumerate() {
                let id = SlotId(slot as u32);
                prop_assert_eq!(pool.state(id), state);
                prop_assert_eq!(pool.entered(id), entered);
                prop_assert_eq!(pool[id], slot);
            }
        }
    }

    #[test]
    fn sweep_frees_exactly_the_expired_slots(
        gaps in prop::collection::vec(0u64..20, 1..30),
        now_after in 0u64..50,
        timeout in 0u64..60,
    ) {
        let capacity = gaps.len();
        let mut pool: Pool<Conn, ()> = Pool::new(capacity, Conn::Free, 0, |_| ());
        let mut now = 0;
        for gap in &gaps {
            now += gap;
            let _ = pool.take_oldest(Conn::Free, Conn::Reading, now).unwrap();
        }
        now += now_after;
        let expected_expired = pool
            .iter(Conn::Reading)
            .filter(|&(_, entered)| now - entered >= timeout)
            .count();

        let mut swept = 0;
        while let Some(slot) = pool.oldest_expired(Conn::Reading, now, timeout) {
            pool.set_state(slot, Conn::Reading, Conn::Free, now);
            swept += 1;
        }
        prop_assert_eq!(swept, expected_expired);
        prop_assert!(pool.iter(Conn::Reading).all(|(_, entered)| now - entered < timeout));
        check_links(&pool);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Misnumbered;

impl State for Misnumbered {
    const COUNT: usize = 1;
    fn index(self) -> usize {
        1
    }
}

#[test]
#[should_panic(expected = "there are 1 states")]
fn new_rejects_a_state_index_out_of_range_even_when_empty() {
    let _: Pool<Misnumbered, ()> = Pool::new(0, Misnumbered, 0, |_| ());
}
