/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  zklock's shared state: the control struct, the table of entries, its
 *	  free list and the request queue.
 *
 *	  The locking and ownership rules (who may write which field, with
 *	  or without the lock; only the worker frees an entry; letting go
 *	  through the lock-free release stack; nothing blocking under the
 *	  lock; quotas; the request FIFO) are in src/README, section 2.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "recipe.h"
#include "trust.h"

#include <sched.h>
#include <time.h>

#include "access/twophase.h"
#include "miscadmin.h"
#include "portability/instr_time.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

ZkControl  *zk_ctl = NULL;

/*
 * Backend slots whose entries are counted: every PGPROC a process that can
 * call zklock's functions may have (regular backends, background workers,
 * and, to be safe, the auxiliary processes and prepared transactions).
 */
static int
quota_slots(void)
{
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
}

/* where the per-slot counts start: after the table of entries */
static Size
quota_offset(int max_entries)
{
	return MAXALIGN(add_size(offsetof(ZkControl, entries),
							 mul_size(max_entries, sizeof(ZkEntry))));
}

/*
 * The segment's size (shmem_request_hook): the control struct and
 * zklock.max_locks entries, then a count and a role per backend slot.
 */
Size
zk_shmem_size(void)
{
	Size		size = quota_offset(zk_max_locks);

	size = add_size(size, mul_size(quota_slots(), sizeof(int)));
	size = MAXALIGN(size);
	size = add_size(size, mul_size(quota_slots(), sizeof(Oid)));
	/* the role quota of each slot's last allocation, then quota.c's table */
	size = MAXALIGN(size);
	size = add_size(size, mul_size(quota_slots(), sizeof(int)));
	size = MAXALIGN(size);
	size = add_size(size, zk_role_rates_size(quota_slots()));
	return size;
}

/* The entries each backend slot holds (zk_ctl->quota_slots of them) */
int *
zk_quota_counts(void)
{
	return (int *) ((char *) zk_ctl + quota_offset(zk_ctl->max_entries));
}

/*
 * The role each backend slot's count is charged to (the session user of
 * the slot's last allocation), for zklock.max_locks_per_role
 */
Oid *
zk_quota_roles(void)
{
	return (Oid *) ((char *) zk_ctl +
					MAXALIGN(quota_offset(zk_ctl->max_entries) +
							 zk_ctl->quota_slots * sizeof(int)));
}

/*
 * The zklock.max_locks_per_role each backend slot's last allocation was
 * made under (shown by zk_role_usage)
 */
int *
zk_quota_limits(void)
{
	return (int *) ((char *) zk_ctl +
					MAXALIGN(MAXALIGN(quota_offset(zk_ctl->max_entries) +
									  zk_ctl->quota_slots * sizeof(int)) +
							 zk_ctl->quota_slots * sizeof(Oid)));
}

/* quota.c's table of per-role write rates, after zk_quota_limits() */
void *
zk_quota_rates_area(void)
{
	return (char *) zk_quota_limits() + MAXALIGN(zk_ctl->quota_slots * sizeof(int));
}

/*
 * Attach to a recipe's own shared memory (ZkRecipeBackend.shmem_bytes), zeroed
 * and set up by its shmem_init the first time.  AddinShmemInitLock held.
 */
static void
recipe_shmem_attach(const ZkRecipeBackend *rb)
{
	bool		found;
	void	   *area;

	if (rb->shmem_bytes == 0)
		return;
	area = ShmemInitStruct(rb->shmem_name, rb->shmem_bytes, &found);
	if (!found)
	{
		memset(area, 0, rb->shmem_bytes);
		if (rb->shmem_init)
			rb->shmem_init(area);
	}
	*rb->shmem = area;
}

/*
 * Attach to (and, the first time, initialise) the shared state.
 * Called from shmem_startup_hook in the postmaster.
 */
void
zk_shmem_init(void)
{
	bool		found;

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	zk_ctl = ShmemInitStruct("zklock", zk_shmem_size(), &found);
	zk_nsclaim_shmem_init();
	for (int k = 0; k < zk_registry->nrecipes; k++)
		recipe_shmem_attach(zk_registry->backends[k]);
	if (!found)
	{
		int			i;

		memset(zk_ctl, 0, zk_shmem_size());
		zk_ctl->lock = &(GetNamedLWLockTranche("zklock"))[0].lock;
		zk_ctl->dsa_lock = &(GetNamedLWLockTranche("zklock"))[1].lock;
		zk_ctl->dsa = DSM_HANDLE_INVALID;
		zk_ctl->conn_state = ZKC_STOPPED;
		/* a new run: random, never 0 (0 names nodes of older versions) */
		while (zk_ctl->run_id == 0)
		{
			if (!pg_strong_random(&zk_ctl->run_id, sizeof(zk_ctl->run_id)))
				zk_ctl->run_id = ((uint64) time(NULL) << 20) ^ (uint64) MyProcPid ^
					(uint64) GetCurrentTimestamp();
		}
		zk_ctl->max_entries = zk_max_locks;
		zk_ctl->quota_slots = quota_slots();
		zk_ctl->queue_head = ZKLOCK_NO_ENTRY;
		zk_ctl->queue_tail = ZKLOCK_NO_ENTRY;
		pg_atomic_init_u32(&zk_ctl->release_head, ZKLOCK_NO_ENTRY);
		for (i = 0; i < ZKCNT_NUM; i++)
			pg_atomic_init_u64(&zk_ctl->counters[i], 0);
		for (i = 0; i < zk_max_locks; i++)
		{
			zk_ctl->entries[i].state = ZKE_FREE;
			pg_atomic_init_u32(&zk_ctl->entries[i].release_req, 0);
			zk_ctl->entries[i].next = (i + 1 < zk_max_locks) ? (uint32) (i + 1) : ZKLOCK_NO_ENTRY;
		}
		zk_ctl->free_head = 0;
	}
	LWLockRelease(AddinShmemInitLock);
	/* the cluster's key (may stop the start: not under the lock) */
	if (!found)
		zk_key_startup();
}

/*
 * Error out when the library was not preloaded (zk_ctl is then NULL).
 */
void
zk_require_shmem(void)
{
	if (zk_ctl == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("zklock must be loaded via shared_preload_libraries"),
				 errhint("Add zklock to shared_preload_libraries in postgresql.conf and restart the server.")));
	/* the SQL functions start here: an ordinary context to register in */
	zk_wait_events_init();
}

/* Entry number idx of the table */
ZkEntry *
zk_entry(uint32 idx)
{
	Assert(idx < (uint32) zk_ctl->max_entries);
	return &zk_ctl->entries[idx];
}

/* e's number in the table (what the queue, the stacks and contexts carry) */
uint32
zk_entry_index(ZkEntry *e)
{
	return (uint32) (e - zk_ctl->entries);
}

/*
 * A process-local hash table (name, nelem as hash_create's) in cxt, whose
 * entries of entrysize bytes begin with their key of keysize bytes: a
 * string with strings, else compared as bytes
 */
HTAB *
zk_hash_create(const char *name, long nelem, Size keysize, Size entrysize,
			   bool strings, MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = keysize;
	ctl.entrysize = entrysize;
	ctl.hcxt = cxt;
	return hash_create(name, nelem, &ctl,
					   HASH_ELEM | (strings ? HASH_STRINGS : HASH_BLOBS) | HASH_CONTEXT);
}

/* r names e */
void
zk_entry_ref_set(ZkEntryRef *r, ZkEntry *e)
{
	r->idx = zk_entry_index(e);
	r->gen = e->gen;
}

/*
 * The record of e in list, whose records each begin with a ZkEntryRef, or
 * NULL
 */
void *
zk_entry_ref_find(List *list, ZkEntry *e)
{
	ListCell   *lc;

	foreach(lc, list)
	{
		ZkEntryRef *r = lfirst(lc);

		if (r->idx == zk_entry_index(e) && r->gen == e->gen)
			return r;
	}
	return NULL;
}

/*
 * Take an entry off the free list.  Caller holds the lock exclusively.
 * Returns NULL when the table is full.
 */
ZkEntry *
zk_entry_alloc(void)
{
	ZkEntry    *e;
	uint32		gen;

	if (zk_ctl->free_head == ZKLOCK_NO_ENTRY)
		return NULL;
	e = zk_entry(zk_ctl->free_head);
	zk_ctl->free_head = e->next;
	gen = e->gen + 1;
	memset(e, 0, offsetof(ZkEntry, name));
	pg_atomic_init_u32(&e->release_req, 0);
	e->name[0] = e->guid[0] = e->node[0] = e->watched[0] = '\0';
	e->data[0] = '\0';
	e->owner_tag[0] = '\0';
	e->rel_next = ZKLOCK_NO_ENTRY;
	e->retry_prev = e->retry_next = ZKLOCK_NO_ENTRY;
	e->dsm = DSM_HANDLE_INVALID;
	e->blob = InvalidDsaPointer;
	memset(&e->part, 0, sizeof(e->part));
	memset(&e->step, 0, sizeof(e->step));
	e->parties = 0;
	e->family = 0;				/* ZKF_LOCKS, the first family */
	e->quota_procno = -1;
	e->gen = gen;
	e->next = ZKLOCK_NO_ENTRY;
	e->state = ZKE_PENDING;
	zk_ctl->used++;
	return e;
}

/*
 * Take an entry for a backend (its PGPROC number procno), counted against
 * its quota: refused (NULL, *why says why) when the slot already counts
 * "quota" entries, when the slots charged to "role" count "role_quota"
 * together (<= 0: no limit for the role), when only "reserve" free entries
 * are left (they are the worker's), or when the table is full.  *held is
 * the slot's count (the role's, when the role's quota refused).  Caller
 * holds the lock exclusively.  Only zk_entry_free gives the count back, so
 * entries the backend let go of still count until the worker has freed
 * them, and a backend that exits leaves its count to its slot's next user
 * until the worker has freed its entries (charged, from then on, to the
 * role of whoever allocates on the slot next).
 */
ZkEntry *
zk_entry_alloc_backend(int procno, int quota, Oid role, int role_quota,
					   int reserve, ZkAllocRefusal *why, int *held)
{
	int		   *counts = zk_quota_counts();
	Oid		   *roles = zk_quota_roles();
	bool		counted = procno >= 0 && procno < zk_ctl->quota_slots;
	ZkEntry    *e;

	*held = counted ? counts[procno] : 0;
	*why = ZKR_NONE;
	if (counted && counts[procno] >= quota)
	{
		*why = ZKR_QUOTA;
		return NULL;
	}
	if (counted && role_quota > 0)
	{
		int			sum = 0;
		int			i;

		/* bounded by the number of backend slots */
		for (i = 0; i < zk_ctl->quota_slots; i++)
			if (counts[i] > 0 && (roles[i] == role || i == procno))
				sum += counts[i];
		if (sum >= role_quota)
		{
			*why = ZKR_ROLE_QUOTA;
			*held = sum;
			return NULL;
		}
	}
	if (zk_ctl->used >= zk_ctl->max_entries - reserve)
	{
		*why = zk_ctl->used >= zk_ctl->max_entries ? ZKR_FULL : ZKR_RESERVE;
		return NULL;
	}
	e = zk_entry_alloc();
	if (e == NULL)
	{
		*why = ZKR_FULL;
		return NULL;
	}
	if (counted)
	{
		counts[procno]++;
		roles[procno] = role;
		zk_quota_limits()[procno] = role_quota;
		e->quota_procno = procno;
	}
	*held = counted ? counts[procno] : 0;
	return e;
}

/*
 * Give an entry back.  Worker only, lock held exclusively.  An entry still
 * on the queue is only marked; it is freed when the worker dequeues it.
 */
void
zk_entry_free(ZkEntry *e)
{
	if (e->state == ZKE_FREE)
		return;
	if (e->queued)
	{
		e->state = ZKE_DONE;
		return;
	}
	zk_retry_remove(e);
	if (DsaPointerIsValid(e->blob))
	{
		/* a one-off answer (or request) nobody freed: the worker's to free */
		dsa_free(zk_dsa(), e->blob);
		e->blob = InvalidDsaPointer;
	}
	if (e->quota_procno >= 0 && e->quota_procno < zk_ctl->quota_slots)
	{
		int		   *counts = zk_quota_counts();

		Assert(counts[e->quota_procno] > 0);
		if (counts[e->quota_procno] > 0)
			counts[e->quota_procno]--;
	}
	e->quota_procno = -1;
	if (e->kind < ZKK_NUM && zk_registry->kinds[e->kind].ops->entry_freed)
		zk_registry->kinds[e->kind].ops->entry_freed(e);
	e->state = ZKE_FREE;
	e->gen++;
	e->next = zk_ctl->free_head;
	zk_ctl->free_head = zk_entry_index(e);
	zk_ctl->used--;
}

/*
 * Put an entry on the worker's queue.  Lock held exclusively.
 */
void
zk_enqueue(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);

	if (e->queued)
		return;
	e->queued = true;
	e->next = ZKLOCK_NO_ENTRY;
	if (zk_ctl->queue_tail == ZKLOCK_NO_ENTRY)
		zk_ctl->queue_head = idx;
	else
		zk_entry(zk_ctl->queue_tail)->next = idx;
	zk_ctl->queue_tail = idx;
}

/*
 * Take the first entry off the queue (worker, lock held exclusively).
 */
uint32
zk_dequeue(void)
{
	uint32		idx = zk_ctl->queue_head;
	ZkEntry    *e;

	if (idx == ZKLOCK_NO_ENTRY)
		return idx;
	e = zk_entry(idx);
	zk_ctl->queue_head = e->next;
	if (zk_ctl->queue_head == ZKLOCK_NO_ENTRY)
		zk_ctl->queue_tail = ZKLOCK_NO_ENTRY;
	e->next = ZKLOCK_NO_ENTRY;
	e->queued = false;
	return idx;
}

/*
 * Owner: hand the entry to the worker without taking the lock.  Returns
 * nothing; the caller sets the worker's latch.  Safe in any state of the
 * backend (abort, exit), and only the first call per allocation counts.
 */
void
zk_release_push(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);
	uint32		old;

	if (pg_atomic_exchange_u32(&e->release_req, 1) != 0)
		return;
	old = pg_atomic_read_u32(&zk_ctl->release_head);
	for (;;)
	{
		e->rel_next = old;
		pg_write_barrier();
		if (pg_atomic_compare_exchange_u32(&zk_ctl->release_head, &old, idx))
			break;
	}
}

/* Worker: take the whole release stack; walk it through rel_next. */
uint32
zk_release_take_all(void)
{
	uint32		head = pg_atomic_exchange_u32(&zk_ctl->release_head, ZKLOCK_NO_ENTRY);

	pg_read_barrier();
	return head;
}

/*
 * The worker's retry list: entries to drive again once the session is
 * usable.  Doubly linked through the entries themselves, so it can never
 * overflow and an entry freed while on it simply leaves it.  Worker only.
 */
static uint32 retry_head = ZKLOCK_NO_ENTRY;
static uint32 retry_tail = ZKLOCK_NO_ENTRY;

/* Append: requests are retried in the order they were made. */
void
zk_retry_add(ZkEntry *e)
{
	uint32		idx = zk_entry_index(e);

	if (e->on_retry)
		return;
	e->on_retry = true;
	e->retry_next = ZKLOCK_NO_ENTRY;
	e->retry_prev = retry_tail;
	if (retry_tail != ZKLOCK_NO_ENTRY)
		zk_entry(retry_tail)->retry_next = idx;
	else
		retry_head = idx;
	retry_tail = idx;
}

/* Take e off the retry list, if it is on it (zk_entry_free does too) */
void
zk_retry_remove(ZkEntry *e)
{
	if (!e->on_retry)
		return;
	if (e->retry_prev != ZKLOCK_NO_ENTRY)
		zk_entry(e->retry_prev)->retry_next = e->retry_next;
	else
		retry_head = e->retry_next;
	if (e->retry_next != ZKLOCK_NO_ENTRY)
		zk_entry(e->retry_next)->retry_prev = e->retry_prev;
	else
		retry_tail = e->retry_prev;
	e->on_retry = false;
	e->retry_prev = e->retry_next = ZKLOCK_NO_ENTRY;
}

/*
 * A new worker starts with an empty retry list: entries a worker that
 * exited had put on its list (its list died with it, their marks did not)
 * must not look as if they were on this one, or they would never be retried
 * (zk_retry_take_over, worker_base.c, puts back those no adopt op takes).
 */
void
zk_retry_forget_marks(void)
{
	int			i;

	for (i = 0; i < zk_ctl->max_entries; i++)
	{
		ZkEntry    *e = zk_entry(i);

		e->on_retry = false;
		e->retry_prev = e->retry_next = ZKLOCK_NO_ENTRY;
	}
	retry_head = retry_tail = ZKLOCK_NO_ENTRY;
}

/* How many entries the retry list holds now */
int
zk_retry_length(void)
{
	uint32		idx;
	int			n = 0;

	for (idx = retry_head; idx != ZKLOCK_NO_ENTRY; idx = zk_entry(idx)->retry_next)
		n++;
	return n;
}

/* Take the first entry off the retry list (ZKLOCK_NO_ENTRY: empty) */
uint32
zk_retry_pop(void)
{
	uint32		idx = retry_head;

	if (idx != ZKLOCK_NO_ENTRY)
		zk_retry_remove(zk_entry(idx));
	return idx;
}

/*
 * Empty the retry list, returning its former head; the caller walks it
 * through retry_next (read each link before driving the entry) with
 * on_retry already cleared.
 */
uint32
zk_retry_take_all(void)
{
	uint32		head = retry_head;
	uint32		idx;

	for (idx = head; idx != ZKLOCK_NO_ENTRY; idx = zk_entry(idx)->retry_next)
		zk_entry(idx)->on_retry = false;
	retry_head = retry_tail = ZKLOCK_NO_ENTRY;
	return head;
}

/*
 * A backend that finds the lock taken first retries without sleeping: the
 * worker holds it for part of a turn, typically a few tens of microseconds,
 * while the shortest sleep, pg_usleep(5), costs the kernel's timer slack
 * (50 us) and two context switches -- on a lone lock call that sleep came
 * one to two times per cycle (issue 40).  Busy retries for ZK_LOCK_SPIN_US
 * (the worker runs on another CPU), then retries that yield the CPU until
 * ZK_LOCK_YIELD_US (the worker may be waiting for this one), then the
 * sleeps.  Bounded, so cancellation works as before.
 */
#define ZK_LOCK_SPIN_US		20
#define ZK_LOCK_YIELD_US	200

/*
 * Backends take the lock here: never an uninterruptible sleep, so that a
 * worker stopped while holding it (SIGSTOP, a debugger) cannot keep a
 * backend from being cancelled.  Retries briefly (above), then short
 * sleeps, then sleeps on the latch a millisecond at a time with
 * CHECK_FOR_INTERRUPTS().  Gives up and returns false after timeout_ms
 * (< 0: never).
 */
bool
zk_backend_lock_timed(LWLockMode mode, long timeout_ms)
{
	int			spins = 0;
	TimestampTz until = 0;
	instr_time	start;
	bool		retrying = true;

	if (LWLockConditionalAcquire(zk_ctl->lock, mode))
		return true;
	INSTR_TIME_SET_CURRENT(start);
	while (!LWLockConditionalAcquire(zk_ctl->lock, mode))
	{
		if (retrying)
		{
			instr_time	now;
			double		us;

			INSTR_TIME_SET_CURRENT(now);
			INSTR_TIME_SUBTRACT(now, start);
			us = INSTR_TIME_GET_MICROSEC(now);
			if (us < ZK_LOCK_SPIN_US)
			{
				int			i;

				for (i = 0; i < 32; i++)
					pg_spin_delay();
				continue;
			}
			if (us < ZK_LOCK_YIELD_US)
			{
				(void) sched_yield();
				continue;
			}
			retrying = false;
		}
		if (++spins < 200)
		{
			pg_usleep(5);
			continue;
		}
		if (timeout_ms >= 0)
		{
			TimestampTz now = GetCurrentTimestamp();

			if (until == 0)
				until = TimestampTzPlusMilliseconds(now, timeout_ms);
			else if (now >= until)
				return false;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 1, zk_wait_event(ZKW_SHMEM));
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return true;
}

/*
 * The same, failing with 08006 when the lock cannot be had within
 * zklock.connect_timeout: only a worker stopped inside its critical
 * section holds it that long.
 */
void
zk_backend_lock(LWLockMode mode)
{
	if (!zk_backend_lock_timed(mode, zk_connect_timeout))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("the zklock worker did not respond"),
				 errdetail("zklock's shared state stayed locked for longer than zklock.connect_timeout (%d ms).",
						   zk_connect_timeout),
				 errhint("Check that the zklock worker is running and not stopped (zk_status(), pg_stat_activity), then retry.")));
}

/* Set the worker's latch, if a worker is running */
void
zk_wake_worker(void)
{
	Latch	   *latch = zk_ctl->worker_latch;

	if (latch)
		SetLatch(latch);
}

/*
 * Set the latch of e's owner, unless it has let go of e: in the worker with
 * its lock held, once it lets go of the lock (zk_worker_defer_wake)
 */
void
zk_wake_owner(ZkEntry *e)
{
	if (e->procno >= 0 && !e->released && !zk_worker_defer_wake(e->procno))
		SetLatch(&GetPGProcByNumber(e->procno)->procLatch);
}

/* Add n to one of zk_status()'s counters (atomic: no lock needed) */
void
zk_count(ZkCounter c, uint64 n)
{
	pg_atomic_fetch_add_u64(&zk_ctl->counters[c], n);
}

/* A ZkConnState as zk_status() shows it */
const char *
zk_conn_state_name(int state)
{
	switch (state)
	{
		case ZKC_STOPPED:
			return "stopped";
		case ZKC_NOT_CONFIGURED:
			return "not configured";
		case ZKC_CONNECTING:
			return "connecting";
		case ZKC_CONNECTED:
			return "connected";
		case ZKC_SUSPENDED:
			return "suspended";
		case ZKC_EXPIRED:
			return "expired";
		case ZKC_AUTH_FAILED:
			return "auth failed";
	}
	return "unknown";
}

/*
 * The dynamic shared memory area for variable-size data (queue payloads
 * and answers), created by the first process that needs it and attached
 * by the others; it lives until the server stops or restarts.
 */
static dsa_area *zk_area = NULL;

/*
 * This process's handle on the area, created (pinned, bounded by
 * zklock.max_payload_memory) or attached on first use, under dsa_lock.
 */
dsa_area *
zk_dsa(void)
{
	MemoryContext old;

	if (zk_area != NULL)
		return zk_area;
	zk_require_shmem();
	old = MemoryContextSwitchTo(TopMemoryContext);
	LWLockAcquire(zk_ctl->dsa_lock, LW_EXCLUSIVE);
	PG_TRY();
	{
		if (zk_ctl->dsa == DSM_HANDLE_INVALID)
		{
			zk_ctl->dsa_tranche = LWLockNewTrancheId();
			LWLockRegisterTranche(zk_ctl->dsa_tranche, "zklock_dsa");
			zk_area = dsa_create(zk_ctl->dsa_tranche);
			dsa_pin(zk_area);
			dsa_set_size_limit(zk_area, (size_t) zk_max_payload_kb * 1024);
			zk_ctl->dsa = dsa_get_handle(zk_area);
		}
		else
		{
			LWLockRegisterTranche(zk_ctl->dsa_tranche, "zklock_dsa");
			zk_area = dsa_attach(zk_ctl->dsa);
		}
		dsa_pin_mapping(zk_area);
	}
	PG_FINALLY();
	{
		LWLockRelease(zk_ctl->dsa_lock);
		MemoryContextSwitchTo(old);
	}
	PG_END_TRY();
	return zk_area;
}

/*
 * zklock.max_payload_memory: the most the dsa may grow to.  Its creator
 * applies the setting; the worker applies it again at its start and at
 * each reload.  Segments the area has already exceed a lowered limit until
 * they are freed; no new one is made meanwhile.
 */
void
zk_dsa_apply_limit(void)
{
	dsa_set_size_limit(zk_dsa(), (size_t) zk_max_payload_kb * 1024);
}
