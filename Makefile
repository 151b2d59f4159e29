# Makefile for zklock, built with PGXS
#
#   make && make install        build and install the extension
#   make installcheck           pg_regress suite (needs a ZooKeeper, see tools/test.sh)
#   make prove_installcheck     TAP suite

MODULE_big = zklock
# by layer (src/README, "Layers"): the base, then each recipe, then the
# module's entry, which alone names every recipe (tools/layers.py checks it)
OBJS = \
	src/core/shmem.o \
	src/core/settings.o \
	src/core/quota.o \
	src/core/kept.o \
	src/core/names.o \
	src/core/nsclaim.o \
	src/core/worker.o \
	src/core/worker_base.o \
	src/core/batch.o \
	src/core/auth.o \
	src/core/aclcheck.o \
	src/core/backend.o \
	src/core/sqlfuncs.o \
	src/core/history.o \
	src/core/trust.o \
	src/lock/lock_names.o \
	src/lock/lock_deadlock.o \
	src/lock/lock_revoke.o \
	src/lock/lock_worker.o \
	src/lock/lock_backend.o \
	src/lock/lock_sql.o \
	src/election/election.o \
	src/election/leader_wait.o \
	src/election/election_sql.o \
	src/election/campaign_sql.o \
	src/semaphore/sem_worker.o \
	src/semaphore/sem_backend.o \
	src/semaphore/sem_sql.o \
	src/lease/lease_worker.o \
	src/lease/lease_backend.o \
	src/lease/lease_sweep.o \
	src/lease/lease_sql.o \
	src/queue/queue_nodes.o \
	src/queue/queue_state.o \
	src/queue/queue_policy.o \
	src/queue/queue_move.o \
	src/queue/queue_worker.o \
	src/queue/queue_publish.o \
	src/queue/queue_nskept.o \
	src/queue/queue_naming.o \
	src/queue/queue_consume.o \
	src/queue/queue_claim.o \
	src/queue/queue_delay.o \
	src/queue/queue_read.o \
	src/queue/queue_settle.o \
	src/queue/queue_backend.o \
	src/queue/queue_sql.o \
	src/barrier/barrier_worker.o \
	src/barrier/barrier_member.o \
	src/barrier/barrier_arrivals.o \
	src/barrier/barrier_backend.o \
	src/barrier/barrier_sql.o \
	src/counter/counter_nodes.o \
	src/counter/counter_backend.o \
	src/counter/counter_worker.o \
	src/counter/counter_sql.o \
	src/zklock.o

EXTENSION = zklock
# every released version's install script ships, frozen (tools/frozen.sh
# checks them against their release tags), with the update scripts between
# them; zklock--1.0.control keeps 1.0 in schema public, where it was released
DATA = zklock--1.0.sql zklock--1.0.control zklock--1.1.sql zklock--1.0--1.1.sql
PGFILEDESC = "zklock - ZooKeeper coordination recipes for PostgreSQL"

SHLIB_LINK = -lzookeeper_st
PG_CPPFLAGS = -I$(srcdir)/src -I$(srcdir)/src/core -I/usr/include/zookeeper

# Warnings, on top of PostgreSQL's own (pg_config --cflags).  Unused
# parameters are not warned about: ZooKeeper completions and PostgreSQL hooks
# have fixed signatures.  -Wextra's -Wclobbered stays on: a local changed
# inside PG_TRY (or COMPLETION_BEGIN) and read after the catch is volatile.
# gcc's own ones and -Werror are added after PGXS, below.
PG_CFLAGS = -Wall -Wextra -Wno-unused-parameter \
	-Wmissing-prototypes -Wmissing-declarations -Wstrict-prototypes \
	-Wold-style-definition -Wpointer-arith -Wvla -Wshadow -Wformat=2

REGRESS = setup lock savepoint families errors status queue barrier lease election semaphore counter
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

# every object depends on every header (they are few and small)
ZKLOCK_HEADERS = $(wildcard $(srcdir)/src/*.h $(srcdir)/src/*/*.h)
$(OBJS): $(ZKLOCK_HEADERS)
