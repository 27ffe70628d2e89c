"""Participant entries left half-way by a killed process, and the doorbell words
(SPEC.md §4, §6.1), as the Python implementation handles them."""
import errno
import os
import resource
import signal

import pyarrow as pa
import pytest
from contextlib import closing, contextmanager

from conftest import rewrite_entry
from gpuring import Consumer, GpuringError, Producer, Ring
from gpuring import layout as L
from gpuring.process import proc_stat, self_start_time
from gpuring.recovery import SweepReport, _free, _mark, _sweep_corrupt, _sweep_owners, arena_path, sweep
from gpuring.slot_consensus import consensus, still
from gpuring.segment import Segment


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


@contextmanager
def _segment(name: str, participants: int):
    Ring.create(name, slots=8, participants=participants).close()
    seg = Segment.open(name)
    try:
        yield seg
    finally:
        seg.close()


def test_entries_left_attaching_or_freeing_by_a_dead_process_or_damaged_are_reclaimed(ring_name):
    with _segment(ring_name, 4) as seg:
        gone = _dead_pid()
        seg.mem.store64(seg.participant(0), L.pword(5, gone, L.P_ATTACHING))
        seg.mem.store64(seg.participant(1), L.pword(7, gone, L.P_FREEING))
        seg.mem.store64(seg.participant(2), L.pword(3, 0, 6))  # a damaged state: lost for good before
        # ACTIVE with pid bits, naming a live process: damage, though the entry's pid
        # and start time pass for alive. Before, it stayed taken while we ran.
        seg.mem.store64(seg.participant(3), L.pword(9, os.getpid(), L.P_ACTIVE))
        seg.mem.store32(seg.participant(3, "pid"), os.getpid())
        seg.mem.store64(seg.participant(3, "start_time"), self_start_time())
        rep = sweep(seg)
        assert (rep.found_dead, rep.freed) == (3, 4)
        assert seg.attach(L.ROLE_CONSUMER) == (0, 6)
        assert seg.attach(L.ROLE_CONSUMER) == (1, 8)
        assert seg.attach(L.ROLE_CONSUMER) == (2, 4)
        assert seg.attach(L.ROLE_CONSUMER) == (3, 10)


@contextmanager
def _descriptors_exhausted():
    """The descriptor table full (soft limit lowered to 64): the next open() fails with EMFILE."""
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, saved[1]))
    held = []
    try:
        with pytest.raises(OSError) as full:
            while True:
                held.append(os.open("/dev/null", os.O_RDONLY))
        assert full.value.errno == errno.EMFILE
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, saved)


def test_a_sweeper_that_cannot_read_proc_never_frees_a_live_peer(ring_name):
    # Before, any failed open of /proc/PID/stat meant "dead": a sweeper at its
    # descriptor limit freed a live consumer's entry.
    with _segment(ring_name, 4) as seg:
        ready_r, ready_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            Consumer.open(ring_name)
            os.write(ready_w, b"a")
            signal.pause()
            os._exit(0)
        assert os.read(ready_r, 1) == b"a"
        try:
            with _descriptors_exhausted():
                with pytest.raises(OSError):
                    proc_stat(pid)
                assert sweep(seg).found_dead == 0
                assert L.pword_state(seg.participant_word(0)) == L.P_ACTIVE
        finally:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(ready_r)
            os.close(ready_w)
        assert proc_stat(pid) is None
        assert sweep(seg).found_dead == 1


def test_a_process_that_cannot_read_its_own_start_time_does_not_attach(ring_name):
    with _segment(ring_name, 4) as seg:
        pid = os.fork()
        if pid == 0:  # a forked child has its own start time, not the parent's cached one
            try:
                with _descriptors_exhausted():
                    seg.attach(L.ROLE_CONSUMER)
            except GpuringError as e:
                os._exit(0 if e.code == "SYSTEM" and e.errno == errno.EMFILE else 1)
            os._exit(2)
        assert os.waitpid(pid, 0)[1] == 0
        assert all(L.pword_state(seg.participant_word(i)) == L.P_FREE for i in range(4))


def test_a_sweeper_that_loses_the_free_race_leaves_the_entry_alone(ring_name):
    with _segment(ring_name, 1) as seg:
        index, gen = seg.attach(L.ROLE_PRODUCER)
        marked = L.pword(gen, 0, L.P_DEAD)  # what the late sweeper saw
        seg.mem.store64(seg.participant(index), L.pword(gen, os.getppid(), L.P_FREEING))
        assert not _free(seg, index, marked)
        # Freed, taken again and dead again: not the entry whose slots it counted.
        seg.mem.store64(seg.participant(index), L.pword(gen + 1, 0, L.P_DEAD))
        assert not _free(seg, index, marked)
        assert seg.mem.load32(seg.participant(index, "pid")) == os.getpid()


def _marked_then_freed(seg: Segment, name: str, index: int) -> list[int]:
    """A consumer at entry ``index`` killed; a sweep marks it and stalls, and
    another sweep frees the entry meanwhile. The stalled sweep's marks."""
    pid = os.fork()
    if pid == 0:
        os._exit(0 if Consumer.open(name).index == index else 1)  # without detaching
    assert os.waitpid(pid, 0)[1] == 0
    dead = _mark(seg, SweepReport())
    assert L.pword_state(dead[index]) == L.P_DEAD
    assert sweep(seg).freed == 1
    return dead


@pytest.mark.parametrize("delivery", ["each", "all"])
def test_a_stalled_sweep_spares_a_new_occupant_of_the_entry_it_marked(ring_name, delivery):
    """Slot words and subscriber bits name no generation: a new consumer at the
    entry looks like the dead one. The stalled sweep must leave its lease, its
    bit in subscribers and its shares alone, and not free its entry (SPEC.md §7,
    Acting on a marked entry)."""
    Ring.create(ring_name, slots=8, participants=4, delivery=delivery).close()
    with Producer.open(ring_name) as producer, closing(Segment.open(ring_name)) as seg:
        dead = _marked_then_freed(seg, ring_name, 1)
        with Consumer.open(ring_name) as newcomer:
            assert newcomer.index == 1
            producer.publish(pa.table({"v": [1]}), user_tag=1)
            frame = newcomer.next(timeout=1)
            rep = SweepReport()
            _sweep_owners(seg, dead, [0] * 4, rep, range(seg.slot_count))
            producer.publish(pa.table({"v": [2]}), user_tag=2)
            assert (rep.released, rep.redelivered) == (0, 0)
            assert not _free(seg, 1, dead[1])
            assert frame.to_arrow().to_pydict() == {"v": [1]}
            frame.release()
            assert newcomer.next(timeout=1).user_tag == 2


def test_freeing_a_dead_sleeper_clears_its_doorbell_and_the_count(ring_name):
    with _segment(ring_name, 2) as seg:
        index, gen = seg.attach(L.ROLE_CONSUMER)
        seg.mem.or32(seg.participant(index, "doorbell"), L.BELL_DATA)
        seg.mem.add32(seg.control("data_doorbells"), 1)
        seg.mem.store64(seg.participant(index), L.pword(gen, 0, L.P_DEAD))
        sweep(seg)
        assert seg.mem.load32(seg.participant(index, "doorbell")) == 0
        assert seg.mem.load32(seg.control("data_doorbells")) == 0
        assert L.pword_state(seg.participant_word(index)) == L.P_FREE


def test_hostile_hints_and_redeliver_word_do_not_hang_and_the_ring_goes_on(ring_name):
    """One write to a hint or to the redeliver word used to make try_claim scan 2**47 positions."""
    from gpuring.slot_protocol import FrameRef, confirm, release, reap, try_claim, try_publish
    with _segment(ring_name, 4) as seg:
        p, pg = seg.attach(L.ROLE_PRODUCER)
        c, _ = seg.attach(L.ROLE_CONSUMER)
        seg.mem.store64(seg.control("redeliver"), 1 << 16 | 1)
        for field in ("head", "tail"):
            seg.mem.store64(seg.control(field), seg.mem.load64(seg.control(field)) + (1 << 46))
        assert try_claim(seg, c) is None
        for i in range(8):
            pos = try_publish(seg, p, FrameRef(100 + i, p, pg, 0, 0, 0))
            assert pos is not None
            got, ref = try_claim(seg, c)
            assert ref.frame_id == 100 + i
            confirm(seg, c, got)
            release(seg, c, got)
            assert reap(seg, p, got)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a segment another user owns needs root")
def test_a_ring_another_user_created_first_is_refused_unless_trusted(ring_name):
    from gpuring import Consumer, GpuringError
    Ring.create(ring_name, slots=8).close()
    os.chown(f"/dev/shm/gpuring.{ring_name}", 65534, 65534)
    with pytest.raises(GpuringError) as e:
        Consumer.open(ring_name)
    assert e.value.code == "SEGMENT_OWNER"
    Consumer.open(ring_name, any_owner=True).close()


@pytest.mark.skipif(os.geteuid() != 0, reason="squatting a name as another user needs root")
def test_an_arena_name_another_user_created_first_is_skipped(ring_name):
    """/dev/shm is sticky: a producer can neither remove nor safely use an arena
    name someone else created. It skips that number and publishes anyway."""
    import pyarrow as pa
    from gpuring import Consumer, Producer
    squatted = f"/dev/shm/gpuring.{ring_name}.p0g1.a0"  # the first producer's first arena
    fd = os.open(squatted, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    child = os.fork()
    if child == 0:  # as nobody: create, publish, read back
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            Ring.create(ring_name, slots=8).close()
            with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
                producer.publish(pa.table({"v": pa.array([7, 8, 9], pa.int32())}))
                with consumer.next(timeout=5) as frame:
                    arena = bytes(frame.description.columns[0].buffers[1].handle).split(b"\0")[0].decode()
                    ok = frame.to_arrow().column(0).to_pylist() == [7, 8, 9] and f"/dev/shm{arena}" != squatted
            Ring.unlink(ring_name)
            code = 0 if ok else 2
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    try:
        assert os.waitstatus_to_exitcode(status) == 0
        st = os.fstat(fd)
        assert st.st_uid == 0 and st.st_size == 0, "the squatter's file is untouched"
    finally:
        os.close(fd)
        os.unlink(squatted)


def _rung(bells) -> list:
    """The entries whose doorbell socket (in ``bells``, by entry) holds a datagram, each read away."""
    got = []
    for index, s in bells.items():
        try:
            s.recv(16)
            got.append(index)
        except BlockingIOError:
            pass
    return got


def test_a_publish_rings_one_reachable_sleeper_skipping_dead_ones(ring_name):
    """SPEC.md §6.1: a frame can be taken by one consumer, so its publish wakes one
    doorbell sleeper; a sleeper whose socket is gone does not count."""
    import socket
    from gpuring import doorbell
    from gpuring.slot_protocol import FrameRef, try_publish
    with _segment(ring_name, 5) as seg:
        p, pg = seg.attach(L.ROLE_PRODUCER)
        sleepers, bells = [], {}
        for n in range(4):
            index, _ = seg.attach(L.ROLE_CONSUMER)
            key = 0x5EED0000 + n
            seg.mem.store64(seg.participant(index, "doorbell_key"), key)
            if n > 0:  # the first sleeper is dead: no socket bound to its name
                bells[index] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                bells[index].bind(doorbell.address(seg.name, key))
                bells[index].setblocking(False)
            seg.mem.or32(seg.participant(index, "doorbell"), L.BELL_DATA)
            seg.mem.add32(seg.control("data_doorbells"), 1)
            sleepers.append(index)

        def armed():
            return [i for i in sleepers if seg.mem.load32(seg.participant(i, "doorbell")) & L.BELL_DATA]

        try:
            try_publish(seg, p, FrameRef(100, p, pg, 0, 0, 0))
            assert _rung(bells) == [sleepers[1]]  # the dead one was tried first, and skipped
            assert armed() == sleepers[2:]
            assert seg.mem.load32(seg.control("data_doorbells")) == 2
            try_publish(seg, p, FrameRef(101, p, pg, 0, 0, 0))
            try_publish(seg, p, FrameRef(102, p, pg, 0, 0, 0))
            assert _rung(bells) == sleepers[2:]
            assert armed() == [] and seg.mem.load32(seg.control("data_doorbells")) == 0
        finally:
            for s in bells.values():
                s.close()


def test_a_sleeper_polling_a_pipe_is_rung_down_it_and_once_dead_reaches_nobody(ring_name, tmp_path):
    """SPEC.md §6.1 (2.5): a sleeper whose entry names its pipe (here another process's) gets
    one byte down the pipe, its socket left quiet; once that process is gone the write
    reaches nobody and the publish rings the next sleeper. An entry that names a file is
    rung on its socket, and the file is never written."""
    import socket
    import subprocess
    import sys
    from gpuring import doorbell
    from gpuring.slot_protocol import FrameRef, try_publish
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys; r, w = os.pipe(); "
                               "print(r, os.fstat(r).st_ino, flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    number, ino = map(int, holder.stdout.readline().split())
    with _segment(ring_name, 3) as seg, open(tmp_path / "not-a-pipe", "wb") as file:
        p, pg = seg.attach(L.ROLE_PRODUCER)
        piped, other = seg.attach(L.ROLE_CONSUMER)[0], seg.attach(L.ROLE_CONSUMER)[0]
        bells = {}
        for n, index in enumerate((piped, other)):
            seg.mem.store64(seg.participant(index, "doorbell_key"), 0x5EED0000 + n)
            bells[index] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            bells[index].bind(doorbell.address(seg.name, 0x5EED0000 + n))
            bells[index].setblocking(False)

        def name_pipe(pid, fd, inode):
            seg.mem.store32(seg.participant(piped, "pid"), pid)
            seg.mem.store32(seg.participant(piped, "doorbell_pipe"), fd)
            seg.mem.store64(seg.participant(piped, "doorbell_pipe_ino"), inode)

        def arm(index, bits):
            seg.mem.or32(seg.participant(index, "doorbell"), bits)
            seg.mem.add32(seg.control("data_doorbells"), 1)

        def publish(frame_id):
            try_publish(seg, p, FrameRef(frame_id, p, pg, 0, 0, 0))

        try:
            name_pipe(holder.pid, number, ino)
            reader = os.open(f"/proc/{holder.pid}/fd/{number}", os.O_RDONLY | os.O_NONBLOCK)
            for frame_id in (100, 101):  # the second ring uses the descriptor the first opened
                arm(piped, L.BELL_DATA | L.BELL_PIPE)
                publish(frame_id)
                assert os.read(reader, 16) == b"\0" and _rung(bells) == []
            os.close(reader)
            holder.kill()
            holder.wait()
            arm(piped, L.BELL_DATA | L.BELL_PIPE)
            arm(other, L.BELL_DATA)
            publish(102)
            assert _rung(bells) == [other]  # the pipe without a reader reached nobody, so the next sleeper
            name_pipe(os.getpid(), file.fileno(), os.fstat(file.fileno()).st_ino)
            arm(piped, L.BELL_DATA | L.BELL_PIPE)
            publish(103)
            assert _rung(bells) == [piped] and os.fstat(file.fileno()).st_size == 0
        finally:
            holder.kill()
            for s in bells.values():
                s.close()


def test_arenas_start_at_1_mib_and_double_unless_a_size_is_chosen(ring_name):
    """Like gpuring/arena.h: a producer of small frames reserves 1 MiB of /dev/shm, not 64."""
    import glob
    import pyarrow as pa
    from gpuring import Producer
    Ring.create(ring_name, slots=16).close()
    column = lambda i: pa.table({"x": pa.array([float(i)] * 150_000, pa.float32())})  # noqa: E731  600 KB

    def sizes() -> list[int]:
        files = glob.glob(f"/dev/shm/gpuring.{ring_name}.p*.a*")
        return [os.stat(f).st_size for f in sorted(files, key=lambda f: int(f.rsplit(".a", 1)[1]))]

    for arena_size, want in ((0, [1 << 20, 2 << 20, 4 << 20]), (1 << 20, [1 << 20] * 5)):
        with Producer.open(ring_name, arena_size=arena_size) as producer:
            for i in range(5):
                producer.publish(column(i))  # unread: every frame keeps its memory
            assert sizes() == want
        for f in glob.glob(f"/dev/shm/gpuring.{ring_name}.p*.a*"):
            os.unlink(f)


def test_frames_released_to_a_producer_that_lost_its_entry_are_moved_on_by_a_sweep(ring_name):
    """SPEC.md §7 step 3: the producer's generation rewritten while it stays
    ACTIVE under its live pid; nobody will reap the frames consumers released
    to it, so a sweep moves them on and a new producer finds the ring free."""
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    with Ring.create(ring_name, slots=4) as ring:
        producer, consumer = Producer.open(ring_name), Consumer.open(ring_name)
        for i in range(4):
            producer.publish(table, timeout=0)
        held = [consumer.next(timeout=5) for _ in range(4)]
        for f in held:
            f.release()
        rewrite_entry(ring_name, producer.index, 5 << 32, L.P_ACTIVE)
        assert ring.sweep().recycled == 4
        producer.close()
        with Producer.open(ring_name) as again:
            for i in range(4):
                again.publish(table, timeout=0)
        consumer.close()


def test_participants_whose_entries_were_taken_fail_with_detached_and_later_ones_carry_on(ring_name):
    """SPEC.md §4, "Losing the entry": DETACHED, a quiet close (the producer
    unlinking its own arenas), and an attach into the consumer's old entry
    repairs what it left, so more frames than slots go through after."""
    table = pa.table({"x": pa.array([1, 2, 3], pa.int64())})
    Ring.create(ring_name, slots=4).close()
    producer, consumer = Producer.open(ring_name), Consumer.open(ring_name)
    producer.publish(table)
    held = consumer.next(timeout=5)
    arena = arena_path(ring_name, producer.index, producer.generation, 0)
    rewrite_entry(ring_name, producer.index, 5 << 32, L.P_ACTIVE)  # another generation
    rewrite_entry(ring_name, consumer.index, 0, L.P_FREE)  # while it holds a frame
    for attempt in (lambda: producer.publish(table, timeout=0), lambda: producer.publish(table, timeout=0.1),
                    lambda: consumer.next(timeout=0.1)):
        with pytest.raises(GpuringError) as e:
            attempt()
        assert e.value.code == "DETACHED"
    assert os.path.exists(arena)
    producer.close()
    assert not os.path.exists(arena)
    with Consumer.open(ring_name) as fresh, Producer.open(ring_name) as again:
        assert fresh.index == consumer.index
        for i in range(10):
            again.publish(table, user_tag=i, timeout=5)
            with fresh.next(timeout=5) as f:
                assert f.user_tag == i
    held.release()  # its lease went with the entry: no error
    consumer.close()


def test_a_sweep_whose_picture_of_the_ring_moved_repairs_nothing(ring_name):
    """A sweeper that read the window while producers went round the ring holds
    words from several laps, on which healthy slots look laps apart: damaged.
    Step 2 judges only a still picture, and CASes from the words it read (see
    test_moving_ring_is_not_repaired in test_endpoints.c; SPEC.md §7 step 2)."""
    Ring.create(ring_name, slots=8).close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer, \
            closing(Segment.open(ring_name)) as seg:
        def frames(n: int) -> None:
            for _ in range(n):
                producer.publish(pa.table({"v": [1]}))
                consumer.next(timeout=1).release()
        frames(3)
        read = consensus(seg, 0, 8)
        assert still(seg, 0, read)
        frames(5 * 8)  # five laps while the sweeper was away
        assert not still(seg, 0, read)
        now = [seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES) for i in range(8)]
        assert not any(_sweep_corrupt(seg, i, w, read) for i, w in enumerate(read.words))
        assert [seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES) for i in range(8)] == now
        assert sweep(seg).corrupt == 0
        producer.publish(pa.table({"v": [2]}), user_tag=2)
        assert consumer.next(timeout=1).user_tag == 2
