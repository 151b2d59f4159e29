/*-------------------------------------------------------------------------
 *
 * compat.h
 *	  Every difference between the PostgreSQL major versions zklock builds
 *	  against (15, 17 and 18), in one place.  The .c files use the names
 *	  below and never test PG_VERSION_NUM themselves.
 *
 *	  Included by zklock.h (so by every file that includes it), after
 *	  postgres.h.  Each item names the release that changed the API.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ZKLOCK_COMPAT_H
#define ZKLOCK_COMPAT_H

#include <inttypes.h>

#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "replication/message.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/wait_event.h"

#if PG_VERSION_NUM < 150000
#error "zklock needs PostgreSQL 15 or later"
#endif

/*
 * A function that never returns: "ZK_NORETURN extern void f(...);".  18
 * replaced the attribute after the declarator, pg_attribute_noreturn(), by
 * pg_noreturn before it.
 */
#if PG_VERSION_NUM >= 180000
#define ZK_NORETURN pg_noreturn
#else
#define ZK_NORETURN pg_attribute_noreturn()
#endif

/*
 * This backend's PGPROC number.  17 removed PGPROC.pgprocno for
 * MyProcNumber.
 */
#if PG_VERSION_NUM >= 170000
#define zk_my_procno()	((int) MyProcNumber)
#else
#define zk_my_procno()	(MyProc->pgprocno)
#endif

/*
 * Whether the session user (not the current one) is a superuser.  17
 * replaced the variable session_auth_is_superuser by a function.
 */
#if PG_VERSION_NUM >= 170000
#define zk_session_user_is_superuser()	GetSessionUserIsSuperuser()
#else
#define zk_session_user_is_superuser()	(session_auth_is_superuser)
#endif

/*
 * JSON semantic-action callbacks.  Since 16 they return a JsonParseErrorType
 * (JSON_SUCCESS to go on); before, nothing.  A callback is declared
 * "static ZK_JSON_CB name(...)" and leaves with "ZK_JSON_RETURN;".
 */
#if PG_VERSION_NUM >= 160000
#define ZK_JSON_CB		JsonParseErrorType
#define ZK_JSON_RETURN	return JSON_SUCCESS
#else
#define ZK_JSON_CB		void
#define ZK_JSON_RETURN	return
#endif

/*
 * A lexer over a palloc'd copy of data[0..len), which must be valid UTF-8
 * without NULs.  17 added the (optional) context to fill as first argument.
 */
static inline JsonLexContext *
zk_json_lexer(const char *data, int len)
{
#if PG_VERSION_NUM >= 170000
	return makeJsonLexContextCstringLen(NULL, pnstrdup(data, len), len, PG_UTF8, true);
#else
	return makeJsonLexContextCstringLen(pnstrdup(data, len), len, PG_UTF8, true);
#endif
}

/*
 * A transactional logical message, written without flushing (the commit
 * record flushes it).  17 added the "flush" argument.
 */
#if PG_VERSION_NUM >= 170000
#define zk_log_logical_message(prefix, msg, size) \
	LogLogicalMessage((prefix), (msg), (size), true, false)
#else
#define zk_log_logical_message(prefix, msg, size) \
	LogLogicalMessage((prefix), (msg), (size), true)
#endif

/*
 * A wait event set with room for n events, freed with FreeWaitEventSet (and
 * tracked by no resource owner).  Up to 16 it lives in the given memory
 * context; 17 takes a resource owner instead (none here) and allocates in
 * TopMemoryContext.
 */
#if PG_VERSION_NUM >= 170000
#define zk_create_wait_event_set(cxt, n)	CreateWaitEventSet(NULL, (n))
#else
#define zk_create_wait_event_set(cxt, n)	CreateWaitEventSet((cxt), (n))
#endif

/*
 * What pg_stat_activity.wait_event shows while zklock sleeps (the names are
 * in settings.c, the documentation in doc/troubleshooting.md).  17 added custom
 * wait events of type Extension, registered by name in shared memory:
 * zk_wait_events_init() registers them once per process.  Before 17
 * every wait is PG_WAIT_EXTENSION (wait_event "Extension").
 */
#if PG_VERSION_NUM >= 170000
#define zk_register_wait_event(name)	WaitEventExtensionNew(name)
#else
#define zk_register_wait_event(name)	PG_WAIT_EXTENSION
#endif

#endif							/* ZKLOCK_COMPAT_H */
