// Package filestore is the durable store.Store: one append-only,
// segmented log shared by every entity, an in-memory index of the live
// messages, periodic checkpoints of that index, and background reclamation
// of dead segments.
//
// # Writing
//
// Commit encodes its batch into one log record (in the caller's goroutine)
// and hands it to the single writer goroutine:
//
//	committers --reqc--> writer --syncc--> syncer --relc--> releaser
//	                       \--prepReq--> preparer
//
// The writer takes the first pending request, drains every other request
// already queued (opportunistic group commit, no timer), writes all their
// records with one write, applies them to the index and releases the
// Commit(sync=false) callers. It passes the Commit(sync=true) callers to
// the syncer as one job and goes on with the next group; the syncer drains
// every pending job, calls fdatasync once and passes them all to the
// releaser, which wakes them while the syncer already runs the next
// fdatasync (a round of one or two waiters, with the releaser idle, the
// syncer wakes itself: a goroutine hand-off fewer for a paced sender's
// commit). So the next group's write overlaps this group's fdatasync,
// and a commit is acknowledged only after an fdatasync that started after
// its record was written. A batch is one record, so it is atomic: after a crash it is
// either whole (checksums match) or dropped with the torn tail.
//
// Commit pacing (the contract is package store's): one wait is allowed
// before an fdatasync, for the followers the previous fdatasync released
// that promised to answer. A busy sender link is one: its next group piled
// up while it waited, so without the wait each fdatasync would cover only
// the first link to come back. The syncer registers them with its
// store.Gate before the releaser wakes them, counts a sync job's followers
// as answered when the writer hands it over, and ends the wait when every
// awaited follower has answered or after Options.FollowerWait (500 µs),
// giving up on the rest (Gate.GiveUp). The wait also counts bytes: each
// sync job carries the record bytes written since the previous one, and
// once the round holds Options.RoundBytes (512 KiB) it closes at once —
// an fdatasync of that much costs mostly its bytes, so waiting for more
// would save little and delay what it covers. The followers still to
// answer are then not given up on but awaited by the next round. (A round
// of 1 KB messages never gets there; one of 64 KB messages after eight.)
//
// A record of 16 KB or more is written from its committer's buffer as
// buffers of a vectored write (pwritev) rather than copied into the
// writer's, and a Data of 16 KB or more is not even copied into the
// record: the record buffer leaves a hole where it goes, and the Data is
// written from the committer's batch as an iovec of its own. Its checksum,
// computed once, is combined into the record's payload checksum instead
// of the bytes being summed twice. A Data that comes in two pieces
// (store.Op.More: the broker's encoded head, then the body where it
// arrived) is laid out the same way piece by piece: the small head is
// copied into the record, a piece of 16 KB or more is a hole of its own,
// and the Data's checksum is combined from the pieces'. The record is
// byte for byte the one the joined Data makes.
//
// The preparer creates the next segment ahead of time: it reserves a
// file's blocks (vfs.Allocator, fallocate(2): the zeros that follow then
// skip ext4's block reservation page by page), fills it with zeros and
// syncs it, so that appending to it changes no file
// metadata and fdatasync has only data to flush. On this machine that made
// group commit markedly faster than appending to a growing file. Once the
// log's fdatasyncs cover Options.RoundBytes or more each on average (large
// messages), a new file's blocks are only reserved, not zero-filled: the
// journal commit that the first fdatasync after an append into reserved
// blocks then makes costs less than writing the log twice (prealloc.go
// has the figures). A reserved range reads as zeros, so the segment reads
// the same either way. It writes
// the zeros a chunk at a time, starting each chunk's writeback at once,
// and keeps pace with the active segment (done when that is half full),
// so that the log's fdatasyncs never find a whole segment of zeros ahead
// of them in the device's cache. When maintenance deletes a segment it
// keeps one file of the right size (recycled-segment.tmp) for the
// preparer, which overwrites it rather than creating a file: its blocks
// are allocated and its pages most likely cached, so that costs about half
// the CPU and disk time. Options.NoPreallocate turns all of it off.
//
// Before each preparation the preparer also gives the page-cache pages of
// sealed segments beyond the newest Options.CachedLogBytes (256 MiB) back
// to the kernel (posix_fadvise DONTNEED; they were synced when sealed, so
// they are clean). A log that keeps what it is sent would otherwise fill
// memory with pages written once and seldom read, and the next segment's
// zeros would go to memory the kernel has to find rather than to pages
// just freed: on the benchmark machine that made zero-filling 3–4 times
// as costly (60–75 % of the broker's CPU in a 64 KB send profile, 24 %
// with the pages given back). Reads of older segments go to the disk.
//
// # Directory
//
//	LOCK                         flock(2) against a second opener
//	0000000001.seg ...           log segments, numbered from 1, no gaps in the replayed part
//	00000000000000123456.ckpt    checkpoint as of LSN 123456 (the newest one is used)
//	next-segment.tmp             the preallocated next segment (zeros, or reserved blocks that read as zeros)
//	recycled-segment.tmp         a deleted segment's file kept for the preparer
//	*.tmp                        also: a checkpoint being written; both removed on open
//	*.corrupt                    a file Salvage set aside
//	blobs/0000000001.blob ...    the Data of large messages, one file each (see Blob files)
//	blobs/0000000002.ref ...     a new head on another blob's body (see Composite blobs)
//
// # Segment file
//
// A segment starts with a 32-byte header and holds whole records, then
// (if preallocated) zeros to the end of the file; all-zero bytes where a
// record header should be mark the end. When the next record would take it
// past Options.SegmentSize, the writer fsyncs it (so that only the last
// segment can ever end in a torn write), then writes the header into the
// prepared file, fsyncs it, renames it to its segment name and fsyncs the
// directory.
//
//	+----------+-------------+----------+--------------+-----------+----------+
//	| "BUSBARLG"| version u32 | segID u32| firstLSN u64 | crc32c u32| zero u32 |   header, 32 bytes
//	+----------+-------------+----------+--------------+-----------+----------+
//	| record | record | record | ...                                          |
//	+-------------------------------------------------------------------------+
//
// All integers are little-endian; crc32c is CRC-32 (Castagnoli) of the
// header's first 24 bytes.
//
// # Record (one Batch)
//
//	0         4         8               16              24        28
//	+---------+---------+---------------+---------------+---------+-----------------+
//	| hcrc u32| len u32 | lsn u64       | synced u64    | pcrc u32| payload (len B) |
//	+---------+---------+---------------+---------------+---------+-----------------+
//
//	hcrc    CRC-32C of bytes 4..28 (lets recovery test any offset cheaply)
//	len     payload length
//	lsn     log sequence number: +1 per record, never reused
//	synced  the highest LSN known durable (fsync'd) when this record was written
//	pcrc    CRC-32C of the payload
//
// The payload is the batch's operations, back to back (uv = uvarint,
// bytes = uv length + bytes):
//
//	kind u8 | entityID uv | ...
//	  PutEntity     name bytes | spec bytes
//	  DeleteEntity  -
//	  Append        seq uv | meta bytes | dataCRC u32 | data bytes
//	  Rewrite       seq uv | meta bytes | dataCRC u32 | data bytes
//	  SetMeta       seq uv | meta bytes
//	  Remove        seq uv
//	  PutValue      key bytes | value bytes
//	  DeleteValue   key bytes
//	  Move (0x40)   seq uv | fromSeg uv | fromOff uv | dataCRC u32 | data bytes
//
//	  AppendBlob (0x41)   seq uv | meta bytes | blobID uv | size uv | dataCRC u32
//	  RewriteBlob (0x42)  seq uv | meta bytes | blobID uv | size uv | dataCRC u32
//
// AppendBlob and RewriteBlob are Append and Rewrite whose Data is in a
// blob file (see Blob files). Move is written only by compaction: "the Data of (entity, seq) that was
// at fromSeg:fromOff is now here"; it applies only if the message still
// has its Data there, so a replay reaches the same decision as the live
// store did.
//
// # Blob files
//
// The Data of an Append or Rewrite of at least Options.BlobThreshold
// bytes (256 KiB) goes to a file of its own, blobs/<id>.blob, holding
// exactly the Data (no header: the log record has its length and CRC).
// Commit writes it in the caller's goroutine, fsyncs it and the blobs
// directory, and only then hands the small AppendBlob record to the
// writer, so a record never refers to a blob that is not durable. Ops of
// one batch whose Data is the same slice (a topic's copies) share one
// blob. The index entry of such a message has segment 0 (no segment has
// that number) and the blob id as its offset; checkpoints write it so.
//
// A blob is never rewritten: compaction moves only Data in segments, so
// a long-lived large message costs no copying. Each blob counts the
// entries that refer to it; when the last goes (Remove, Rewrite,
// DeleteEntity, or a record that named it but applied to nothing), the
// blob is deleted once the log is synced past that record (the sweep
// after every synced Commit, and the background pass, which syncs the log
// first when blobs wait, and Close): a crash can therefore never find a
// live message without its blob. Open deletes the
// blob files nothing refers to (a crash between a blob write and its
// record, or after a removal before the file was deleted) and fails with
// store.ErrCorrupt if a referenced one is missing or of the wrong length
// (Salvage drops its messages instead). ReadData checks the Data's CRC,
// so a damaged blob is a store.ErrCorrupt naming the file.
//
// A commit refused (a full disk: store.NoSpaceError) removes the blobs it
// wrote; after ErrFailed they are left for the next Open to judge.
//
// # Composite blobs
//
// An Append or Rewrite whose Tail is the body of a blob of this store
// (store.DataSection: a large message dead-lettered with new properties,
// or auto-forwarded, whose body is unchanged) does not copy the body: its
// blob is a composite, blobs/<id>.ref, holding a 32-byte header (the base
// blob's id, where the body starts in it and its length, the base's CRC)
// and the new head; its Data is the head followed by the base's bytes
// from there to the base's end. The log record is the ordinary
// AppendBlob or RewriteBlob, with the whole Data's size and CRC (combined
// from the head's, the base's and that of the base's bytes before the
// body, so the body is not read either). The record format is unchanged;
// a data directory without .ref files opens as before. A composite made
// from a composite refers to the first one's base, so there are no
// chains. A live composite counts as one reference to its base, which is
// pinned from the moment the .ref file is written until its record is
// applied; Open reads the headers of the live composites after replaying
// the log and counts those references again. A damaged base is
// corruption of every composite's Data it holds the body of. See
// composite.go.
//
// # Index
//
// Per entity, the live messages sit in chunks of up to 256 entries sorted
// by seq; an entry is 32 pointer-free bytes (seq, segment, offset, size
// and CRC of Data, offset and length of Meta in the chunk's Meta arena;
// segment 0 means the Data is in the blob whose id is the offset).
// Meta is kept in memory; Data never is: ReadData preads it from its
// segment (usually from the page cache) and checks its CRC. Memory is
// about 32 bytes + len(Meta) per message. Chunks are copy-on-write, so a
// snapshot of the whole index (for a checkpoint, compaction or Recover)
// costs O(chunks) under the lock. Each segment counts the live messages
// whose Data it holds.
//
// # Checkpoint file
//
//	+----------+-------------+-----------+---------+---------------+----------+-----------+
//	| "BUSBARCK"| version u32 | seg u32   | lsn u64 | offset u64    | zero u32 | crc32c u32|   header, 40 bytes
//	+----------+-------------+-----------+---------+---------------+----------+-----------+
//	| frame | frame | ... | end frame                                                     |
//	+---------------------------------------------------------------------------------------+
//
//	frame  = len u32 | crc32c u32 (of kind+body) | kind u8 | body (len counts kind+body)
//	entity = 1 | id uv | lastSeq uv | name bytes | spec bytes
//	msgs   = 2 | entityID uv | n uv | n × (seq uv | seg uv | off uv | size uv | dataCRC u32 | meta bytes)
//	value  = 3 | entityID uv | key bytes | value bytes
//	end    = 4 | entities uv | messages uv | values uv
//
// A checkpoint is the whole state as of record lsn; recovery continues
// with the record at (seg, offset). It is written only after the log is
// synced up to lsn, to a .tmp file that is fsync'd, renamed into place and
// made durable with a directory fsync; only then are older checkpoints and
// unneeded segments deleted. A crash at any point leaves either the new or
// the previous checkpoint, each with the log it needs.
//
// # Recovery
//
// Open loads the newest checkpoint, then replays every record after it,
// checking each record's checksums and that LSNs follow one another.
// Zeros from the bad spot to the end of the file are the clean end of a
// preallocated segment. Any other bad record means one of two things:
//
//   - a torn write: the last, unsynced writes before a power loss. It can
//     only be in the last segment, and nothing after it can have been
//     synced. Open truncates the segment there and goes on.
//   - corruption: anything else. Open fails with an error wrapping
//     store.ErrCorrupt naming the file and offset, unless Options.Salvage
//     is set, in which case it skips to the next good record (or sets a
//     bad file aside), logs what was lost, and writes a fresh checkpoint.
//
// The synced field tells them apart: Open scans the bytes after a bad
// record in the last segment for any whole record whose synced LSN is at
// least the LSN expected at the bad spot. Such a record was written after
// the bad spot had been fsync'd, so the damage is not a torn write.
//
// # A full or failing disk
//
// A failed write of a group (ENOSPC, say) refuses that group's commits
// (earlier parts of the group that were written before a segment change
// are kept) and gives their LSNs back. The failed write may have left some
// of its bytes in the segment, even whole records; recovery would replay
// those, or take a torn one followed by newer records for corruption. So
// before anything else is written the writer zeroes them (inside the
// preallocated size: overwriting takes no space) or truncates them off
// (past it: this frees space) and fsyncs the segment; the next record goes
// where the failed one would have. The store then goes on: each commit
// tries again, and succeeds once there is space. A refusal for lack of
// space is a *store.NoSpaceError with the free and total bytes. When a new
// segment cannot be made the active one grows past SegmentSize for a
// second before the next attempt. A checkpoint that cannot be written is
// retried later (Close goes without one: the synced log has everything).
//
// A failed fsync is different: after it, what reached the disk is unknown
// and a retried fsync proves nothing, so the store stops (store.ErrFailed)
// and needs a restart, whose recovery replays what is really on disk.
// Committers that were not acknowledged get the error; nothing
// acknowledged is lost.
//
// CheckGrowth and Health (store.DiskChecker) report the free space
// against the low-disk watermark (Options.MinFreeBytes, MinFreePercent),
// looked up with statfs at most every 250 ms, and the state above.
//
// # Reclamation
//
// A background goroutine (every Options.BackgroundInterval):
//
//  1. forward-copies, at no more than Options.CompactRate, the live Data
//     out of sealed segments (except the newest sealed one, for its first
//     10 seconds) that are at
//     most Options.CompactLiveRatio live, as Move records through the
//     writer, so that a long-lived deferred or dead-lettered message does
//     not pin a whole segment;
//  2. writes a checkpoint when the interval has passed, when the log grew
//     by more than max(8 segments, 256 MiB) since the last one, or when
//     the dead segments waiting for one outweigh it;
//  3. deletes every segment that is older than the checkpoint's replay
//     position, holds no live Data, and that the checkpoint does not
//     refer to.
//
// Compact runs the same pass at once and without the rate limit, and
// Checkpoint writes a checkpoint at once.
//
// # Measured (this 2-core box, shared with other jobs; see bench_test.go)
//
// Durable 1 KB commits (one OpAppend each): 143k-207k/s with 256
// committers, 74k-92k/s with 64, ~5k/s with 1. Restart with 1M queued
// 1 KB messages (64-byte Meta): 0.3-0.6 s from a checkpoint, 0.5-0.6 s
// replaying the whole 1 GB log (page cache warm), ~94 MB of heap. After
// draining 1M messages the disk went from 1.1 GB to 64 MB within 0.4 s.
package filestore
