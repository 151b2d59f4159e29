# Makefile for zklock, built with PGXS
#
#   make && make install        build and install the extension
#   make installcheck           pg_regress suite (needs a ZooKeeper, see tools/test.sh)
#   make prove_installcheck     TAP suite

MODULE_big = zklock
OBJS = \
	src/zklock.o \
	src/shmem.o \
	src/quota.o \
	src/kept.o \
	src/names.o \
	src/nsclaim.o \
	src/worker.o \
	src/worker_base.o \
	src/batch.o \
	src/auth.o \
	src/aclcheck.o \
	src/lock_worker.o \
	src/backend.o \
	src/lock_backend.o \
	src/sqlfuncs.o \
	src/lock_sql.o \
	src/queue_worker.o \
	src/queue_publish.o \
	src/queue_nskept.o \
	src/queue_naming.o \
	src/queue_consume.o \
	src/queue_claim.o \
	src/queue_read.o \
	src/queue_settle.o \
	src/history.o \
	src/trust.o \
	src/queue_backend.o \
	src/queue_sql.o \
	src/barrier_worker.o \
	src/barrier_member.o \
	src/barrier_arrivals.o \
	src/barrier_backend.o \
	src/barrier_sql.o \
	src/lease_worker.o \
	src/lease_backend.o \
	src/lease_sweep.o \
	src/lease_sql.o \
	src/election.o \
	src/election_sql.o \
	src/sem_worker.o \
	src/sem_backend.o \
	src/sem_sql.o

EXTENSION = zklock
# every released version's install script ships, frozen (tools/frozen.sh
# checks them against their release tags), with the update scripts between
# them; zklock--1.0.control keeps 1.0 in schema public, where it was released
DATA = zklock--1.0.sql zklock--1.0.control zklock--1.1.sql zklock--1.0--1.1.sql
PGFILEDESC = "zklock - ZooKeeper coordination recipes for PostgreSQL"

SHLIB_LINK = -lzookeeper_st
PG_CPPFLAGS = -I$(srcdir)/src -I/usr/include/zookeeper

# Warnings, on top of PostgreSQL's own (pg_config --cflags).  Unused
# parameters are not warned about: ZooKeeper completions and PostgreSQL hooks
# have fixed signatures.  -Wextra's -Wclobbered stays on: a local changed
# inside PG_TRY (or COMPLETION_BEGIN) and read after the catch is volatile.
# gcc's own ones and -Werror are added after PGXS, below.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter \
	-Wmissing-prototypes -Wmissing-declarations -Wstrict-prototypes \
	-Wold-style-definition -Wpointer-arith -Wvla -Wshadow -Wformat=2

REGRESS = setup lock savepoint families errors status queue barrier lease election semaphore
REGRESS_OPTS = --temp-config=$(srcdir)/test/regress.conf --temp-instance=tmp_regress \
	--load-extension=zklock --load-extension=dblink

TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

EXTRA_CLEAN = tmp_regress tmp_check results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after PGXS, which resets it: the TAP tests' shared module
PROVE_FLAGS += -I $(srcdir)/test/t

# after PGXS, which sets CC: warnings only gcc knows; then -Werror when the
# environment says CI (CI=true, as CI services set it) or ZKLOCK_WERROR=1
# (tools/test.sh sets it): the build must print no warning
ifneq (,$(findstring gcc,$(CC)))
override CFLAGS += -Wduplicated-cond -Wlogical-op
endif
ifneq (,$(filter true 1,$(CI) $(ZKLOCK_WERROR)))
override CFLAGS += -Werror
endif

# every object depends on the shared header
$(OBJS): src/zklock.h src/recipelist.h src/recipe.h src/lock.h src/queue.h src/barrier.h \
	src/lease.h src/semaphore.h src/election.h src/trust.h src/compat.h \
	src/queue_int.h src/barrier_int.h src/batch.h
