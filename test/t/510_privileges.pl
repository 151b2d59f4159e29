
# 510_privileges.pl - SQL privileges, and two checks of issue 23
# ("Deployable on shared clusters").
#
# One ZooKeeper; cluster A with two databases (postgres, db2), cluster B.
#
# 1. Attacks: roles with LOGIN and no grants (mallory on A, in both
#    databases; eve on B) try to peek, dequeue and COMMIT, enqueue, purge a
#    tenant's queue, block its lock with a session lock, open its gate,
#    arrive, reset its arrivals, take its lease, pin its semaphore's
#    max_leases, join its barrier, and read holders, views and the
#    *_internal() functions: every one fails with 42501 and ZooKeeper
#    (counted through kazoo) is unchanged.  Before issue 23 every one but
#    zk_queue_release_cluster and the views succeeded.
# 2. Catalog: the functions of the extension that PUBLIC may execute are
#    exactly the two doc/security.md names (a function added without being covered
#    fails here); every other function is in exactly one group of
#    zk_privilege_groups() (which names them with their schema) or is
#    zk_grant/zk_revoke/zk_set_database_namespace (superusers only); doc/security.md's group table
#    matches zk_privilege_groups(); the views are readable by pg_monitor only.
# 3. Groups: zk_grant(group, role) lets a role do its group's operations
#    and refuses the others (each group's representative call, plus
#    has_function_privilege over every function); doc/security.md's GRANT line for
#    produce grants the same as zk_grant('produce'); a pg_monitor member
#    reads the views and holders in both databases; zk_grant's errors;
#    zk_revoke.  CREATE EXTENSION in a second database of A works.
# 4. Semaphore names ending in "-__lock__" (their pool would be the guard of
#    another semaphore) fail with 22023 and create nothing.  Before: created
#    the pool inside the guard of semaphore "x".
# 5. zk_queue_release_cluster refuses a live cluster (55006, the run
#    named): B's claim stays and only B commits the item.  Before: the claim
#    was released and A's consumer took the item B committed.  Once B is
#    stopped and its session expired, the release works.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('privA', $zk, session_timeout => '4s', connect_timeout => '3s');
my $B = zk_node('privB', $zk, session_timeout => '4s', connect_timeout => '3s');
my $R = '/zklock';

$A->safe_psql('postgres', 'CREATE DATABASE db2');
my ($rc, $out, $err) = $A->psql('db2', 'CREATE EXTENSION zklock');
is($rc, 0, 'CREATE EXTENSION zklock in a second database of the same cluster works')
  or diag $err;

$A->safe_psql('postgres', 'CREATE ROLE mallory LOGIN');
$B->safe_psql('postgres', 'CREATE ROLE eve LOGIN');

# Run $sql as $role in database $db of $node (psql stops at the first
# error); returns (sqlstate, output, stderr)
sub as_role
{
	my ($node, $db, $role, $sql) = @_;
	my ($rc, $out, $err) = $node->psql($db, $sql,
		extra_params => [ '-U', $role, '-v', 'VERBOSITY=verbose' ],
		on_error_stop => 1);
	my $st = $err =~ /(?:ERROR|FATAL):\s+([0-9A-Z]{5}):/ ? $1 : ($rc == 0 ? '00000' : "rc$rc");
	return ($st, $out, $err);
}

sub sqlstate_as { my @r = as_role(@_); return $r[0]; }

# ---- the tenant's objects (as superuser, in A's postgres) ----
$A->safe_psql('postgres', q{
	SELECT zk_enqueue('tq', 't' || i) FROM generate_series(1, 3) i;
	BEGIN; SELECT zk_gate_close('tg'); COMMIT;
	BEGIN; SELECT zk_arrive('ta', 'p1'); COMMIT;
});

sub taken { my @l = zk_children($zk, "$R/queues/$_[0]/taken"); return scalar @l; }
sub exists01 { return zk_exists($zk, $_[0]) ? 1 : 0; }

# what the attacks could change, counted through ZooKeeper
sub state
{
	return join(' ',
		'tq=' . zk_count($zk, "$R/queues/tq"),
		'tlock=' . zk_count($zk, "$R/locks/tlock"),
		'tg=' . exists01("$R/gates/tg"),
		'ta=' . zk_count($zk, "$R/arrivals/ta"),
		'tl=' . exists01("$R/leases/tl") . '/' . zk_count($zk, "$R/leases/tl"),
		'ts=' . exists01("$R/semaphores/ts") . '/' . exists01("$R/semaphores/ts-__lock__"),
		'tb=' . exists01("$R/barriers/tb"),
		'tg2=' . exists01("$R/gates/tg2"),
		'txns=' . zk_count($zk, "$R/txns"));
}

my $before = state();
is($before, 'tq=6 tlock=0 tg=1 ta=1 tl=0/0 ts=0/0 tb=0 tg2=0 txns=0',
	"the tenant's queue (3 items, with entries, taken and delayed), closed gate and arrival are in ZooKeeper");

# ---- 1. attacks by roles without grants ----
my @attacks = (
	[ 'peek', "SELECT * FROM zk_queue_peek('tq')" ],
	[ 'queue length', "SELECT zk_queue_length('tq')" ],
	[ 'dequeue + COMMIT', "BEGIN; SELECT * FROM zk_dequeue('tq', '1s'); COMMIT;" ],
	[ 'try_dequeue', "SELECT * FROM zk_try_dequeue('tq', 10)" ],
	[ 'enqueue (forge)', "BEGIN; SELECT zk_enqueue('tq', 'forged', 0); COMMIT;" ],
	[ 'purge', "SELECT zk_queue_purge('tq')" ],
	[ 'session lock', "SELECT zk_session_lock('tlock', '1s')" ],
	[ 'try session lock shared', "SELECT zk_try_session_lock_shared('tlock')" ],
	[ 'transaction lock', "BEGIN; SELECT zk_lock('tlock', '1s'); COMMIT;" ],
	[ 'gate open', "BEGIN; SELECT zk_gate_open('tg'); COMMIT;" ],
	[ 'gate close', "BEGIN; SELECT zk_gate_close('tg2'); COMMIT;" ],
	[ 'gate wait', "SELECT zk_gate_wait('tg', '0')" ],
	[ 'arrive (forge)', "BEGIN; SELECT zk_arrive('ta', 'forged'); COMMIT;" ],
	[ 'await', "SELECT zk_await('ta', 1, '0')" ],
	[ 'arrivals', "SELECT * FROM zk_arrivals('ta')" ],
	[ 'arrivals reset', "SELECT zk_arrivals_reset('ta')" ],
	[ 'lease for years', "SELECT zk_try_lease('tl', '1000 years')" ],
	[ 'lease holder', "SELECT * FROM zk_lease_holder('tl')" ],
	[ 'semaphore max_leases', "SELECT zk_try_session_semaphore('ts', 1)" ],
	[ 'semaphore', "BEGIN; SELECT zk_semaphore('ts', 1, '1s'); COMMIT;" ],
	[ 'semaphore holders', "SELECT * FROM zk_semaphore_holders('ts')" ],
	[ 'barrier join', "SELECT zk_barrier_enter('tb', 2, '0')" ],
	[ 'lock holders', "SELECT * FROM zk_lock_holders('tlock')" ],
	[ 'lock holders (key)', "SELECT * FROM zk_lock_holders(42)" ],
	[ 'zk_locks', "SELECT * FROM zk_locks" ],
	[ 'zk_locks_internal', "SELECT * FROM zk_locks_internal()" ],
	[ 'zk_entries', "SELECT * FROM zk_entries" ],
	[ 'zk_entries_internal', "SELECT * FROM zk_entries_internal()" ],
	[ 'zk_queues', "SELECT * FROM zk_queues" ],
	[ 'zk_queues_internal', "SELECT * FROM zk_queues_internal()" ],
	[ 'zk_leases', "SELECT * FROM zk_leases" ],
	[ 'zk_leases_internal', "SELECT * FROM zk_leases_internal()" ],
	[ 'zk_elections', "SELECT * FROM zk_elections" ],
	[ 'zk_elections_internal', "SELECT * FROM zk_elections_internal()" ],
	[ 'zk_semaphores', "SELECT * FROM zk_semaphores" ],
	[ 'zk_semaphores_internal', "SELECT * FROM zk_semaphores_internal()" ],
	[ 'zk_quotas', "SELECT * FROM zk_quotas" ],
	[ 'zk_role_usage', "SELECT * FROM zk_role_usage()" ],
	[ 'zk_kept_totals', "SELECT * FROM zk_kept_totals()" ],
	[ 'zk_namespace_totals', "SELECT * FROM zk_namespace_totals()" ],
	[ 'zk_status', "SELECT * FROM zk_status()" ],
	[ 'election candidates', "SELECT * FROM zk_election_candidates('te')" ],
	[ 'leader', "SELECT * FROM zk_leader('te')" ],
	[ 'is leader', "SELECT zk_is_leader('te')" ],
	[ 'campaign', "BEGIN; SELECT zk_campaign('te', '1s'); COMMIT;" ],
	[ 'session campaign', "SELECT zk_session_campaign('te', '1s')" ],
	[ 'try campaign', "SELECT zk_try_campaign('te')" ],
	[ 'try session campaign', "SELECT zk_try_session_campaign('te')" ],
	[ 'resign', "SELECT zk_resign('te')" ],
	[ 'campaign token', "SELECT zk_campaign_token('te')" ],
	[ 'campaign candidates', "SELECT * FROM zk_campaign_candidates('te')" ],
	[ 'unlock all', "SELECT zk_unlock_all()" ],
	[ 'release cluster', "SELECT zk_queue_release_cluster('123')" ],
	[ 'zk_grant', "SELECT zk_grant('admin', current_user::regrole)" ],
	[ 'zk_revoke', "SELECT zk_revoke('monitor', 'pg_monitor')" ],
);
for my $t ([ $A, 'postgres', 'mallory', 'A' ], [ $A, 'db2', 'mallory', 'A/db2' ],
	[ $B, 'postgres', 'eve', 'B' ])
{
	my ($node, $db, $role, $where) = @$t;
	for my $a (@attacks)
	{
		my ($st, $o, $e) = as_role($node, $db, $role, $a->[1]);
		is($st, '42501', "$role on $where: $a->[0] is refused (42501)")
		  or diag "output: $o\nstderr: $e";
	}
	is(state(), $before, "$role on $where changed nothing in ZooKeeper");
}
my $granted_mallory = $A->safe_psql('postgres',
	"SELECT count(*) FROM pg_proc WHERE proname = 'zk_status' AND has_function_privilege('mallory', oid, 'EXECUTE')");
is($granted_mallory, '0', 'the failed zk_grant by mallory granted nothing');
is($A->safe_psql('db2', "SELECT zk_try_lock('tlock')"), 't',
	"the tenant takes its lock (another database): nobody blocks it");
is($A->safe_psql('postgres',
		"SELECT string_agg(body, ',' ORDER BY msg_id) FROM zk_try_dequeue('tq', 10)"),
	't1,t2,t3', "the tenant's queue holds exactly its three items, none forged");
is($A->safe_psql('postgres', "SELECT string_agg(participant, ',') FROM zk_arrivals('ta')"),
	'p1', 'the arrivals are exactly the tenant\'s');

# ---- 2. the catalog ----
open(my $fh, '<', "$ZkLockTest::SRC/doc/security.md") or die "doc/security.md: $!";
my $secdoc = do { local $/; <$fh> };
close $fh;
my ($privsec) = $secdoc =~ /^## Privileges\n(.*?)^## /ms;
ok(defined $privsec, 'doc/security.md has a Privileges section');
my ($harmless_text) = $privsec =~ /revokes `EXECUTE` from\s+`PUBLIC` on every function of the extension but (?:one|two), (.*?)\. A role without/s;
my $harmless = join(',', sort { $a cmp $b } (($harmless_text // '') =~ /`(zk_\w+\([^`]*\))`/g));
is($harmless, 'zk_path(text,text),zk_privilege_groups()', 'doc/security.md names the two functions PUBLIC keeps');
my %readme_groups;
for my $line (split /\n/, $privsec)
{
	next unless $line =~ /^\| `(\w+)` \| ([^|]+) \|/;
	my ($g, $objs) = ($1, $2);
	$readme_groups{$g} = join(',', sort { $a cmp $b } ($objs =~ /`(\w+)`/g));
}

my $EXT_FUNCS = q{
	FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
	JOIN pg_proc p ON p.oid = d.objid
	WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'};
for my $t ([ $A, 'postgres', 'A' ], [ $A, 'db2', 'A/db2' ], [ $B, 'postgres', 'B' ])
{
	my ($node, $db, $where) = @$t;
	is($node->safe_psql($db, qq{
		SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text)
		$EXT_FUNCS
		AND EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		             WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')}),
		$harmless, "$where: PUBLIC may execute exactly the documented harmless list");
	is($node->safe_psql($db, qq{
		SELECT coalesce(string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text), '')
		$EXT_FUNCS
		AND p.oid::regprocedure::text NOT IN ('zk_privilege_groups()', 'zk_path(text,text)',
		    'zk_grant(text,regrole,boolean)', 'zk_revoke(text,regrole)', 'zk_set_database_namespace(text,boolean)', 'zk_namespace_claim(text,boolean)')
		AND (SELECT count(*) FROM zk_privilege_groups() g
		      WHERE CASE WHEN g.object_type = 'function' THEN g.object::regprocedure END = p.oid) <> 1}),
		'', "$where: every other function is in exactly one group");
	is($node->safe_psql($db, q{
		SELECT count(*) FROM zk_privilege_groups() g
		 WHERE g.object_type = 'function' AND g.object::regprocedure NOT IN
		       (SELECT d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
		         WHERE e.extname = 'zklock' AND d.classid = 'pg_proc'::regclass)}),
		'0', "$where: the groups name only the extension's functions");
	is($node->safe_psql($db, q{
		SELECT string_agg(c.relname || ':' || coalesce((
		         SELECT string_agg(a.grantee::regrole::text || '/' || a.privilege_type, ' ')
		           FROM aclexplode(c.relacl) a WHERE a.grantee <> c.relowner), ''),
		         ',' ORDER BY c.relname)
		  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
		  JOIN pg_class c ON c.oid = d.objid
		 WHERE d.classid = 'pg_class'::regclass AND c.relkind = 'v'}),
		'zk_elections:pg_monitor/SELECT,zk_entries:pg_monitor/SELECT,zk_leases:pg_monitor/SELECT,zk_locks:pg_monitor/SELECT,'
		  . 'zk_queue_metrics:pg_monitor/SELECT,zk_queues:pg_monitor/SELECT,zk_quotas:pg_monitor/SELECT,zk_semaphores:pg_monitor/SELECT',
		"$where: the views are readable by pg_monitor (and their owner) only");
}
my %sql_groups;
for my $row (split /\n/, $A->safe_psql('postgres', q{
	SELECT group_name, string_agg(DISTINCT regexp_replace(object, '^[^(]*\.|\(.*$', '', 'g'), ',')
	  FROM zk_privilege_groups() GROUP BY 1}))
{
	my ($g, $objs) = split /\|/, $row;
	$sql_groups{$g} = join(',', sort { $a cmp $b } split /,/, $objs);
}
is_deeply(\%readme_groups, \%sql_groups, "doc/security.md's group table is zk_privilege_groups()");
my @groups = sort keys %sql_groups;
is(join(',', @groups), 'admin,arrive,campaign,consume,counter,election,lease,lock,monitor,produce,semaphore,wait',
	'eleven groups');

# ---- 3. each group, granted with zk_grant as doc/security.md says ----
# one representative call per group, harmless names of its own
my %op = (
	lock => "SELECT zk_try_lock('g_lock')",
	produce => "SELECT zk_enqueue('g_q', 'x')",
	consume => "SELECT count(*) FROM zk_try_dequeue('g_q')",
	wait => "SELECT zk_gate_wait('g_gate', '0')",
	arrive => "SELECT zk_arrive('g_arr', 'p')",
	semaphore => "SELECT zk_try_semaphore('g_sem', 2)",
	lease => "SELECT count(*) FROM zk_lease_holder('g_lease')",
	election => "SELECT zk_is_leader('g_el')",
	counter => "SELECT zk_counter_add('g_counter')",
	# (the tests' root namespace: only a superuser campaigns there)
	campaign => "SELECT zk_resign('g_camp')",
	admin => "SELECT zk_arrivals_reset('g_arr')",
	monitor => "SELECT count(*) FROM zk_locks",
);
is(join(',', sort keys %op), join(',', @groups), 'a call for every group');
for my $g (@groups)
{
	$A->safe_psql('postgres', "CREATE ROLE zkg_$g LOGIN; SELECT zk_grant('$g', 'zkg_$g')");
}
for my $g (@groups)
{
	my $got = $A->safe_psql('postgres', qq{
		SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text) $EXT_FUNCS
		AND has_function_privilege('zkg_$g', p.oid, 'EXECUTE')});
	my $want = $A->safe_psql('postgres', qq{
		SELECT string_agg(o, ',' ORDER BY o) FROM (
		  SELECT object::regprocedure::text AS o FROM zk_privilege_groups()
		   WHERE group_name = '$g' AND object_type = 'function'
		  UNION ALL SELECT 'zk_privilege_groups()' UNION ALL SELECT 'zk_path(text,text)') s});
	is($got, $want, "zkg_$g may execute exactly its group's functions");
	is($A->safe_psql('postgres', qq{
		SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class
		 WHERE relname IN ('zk_locks', 'zk_entries', 'zk_queues', 'zk_leases', 'zk_elections', 'zk_semaphores', 'zk_quotas')
		   AND has_table_privilege('zkg_$g', oid, 'SELECT')}),
		$g eq 'monitor' ? 'zk_elections,zk_entries,zk_leases,zk_locks,zk_queues,zk_quotas,zk_semaphores' : '',
		"zkg_$g reads the views only if it is monitor");
	for my $h (@groups)
	{
		my ($st, $o, $e) = as_role($A, 'postgres', "zkg_$g", $op{$h});
		is($st, $g eq $h ? '00000' : '42501',
			"zkg_$g: $h call " . ($g eq $h ? 'works' : 'is refused'))
		  or diag "output: $o\nstderr: $e";
	}
}
is(sqlstate_as($A, 'db2', 'zkg_consume', "SELECT count(*) FROM zk_try_dequeue('g_q')"), '42501',
	'a grant in one database gives nothing in another');

# doc/security.md's GRANT line for produce grants what zk_grant('produce') grants
# (it may span lines)
my ($grant_line) = $privsec =~ /^\s*(GRANT EXECUTE ON FUNCTION zk_enqueue\(.*?;)\s*$/ms;
ok(defined $grant_line, "doc/security.md shows produce's GRANT line");
$A->safe_psql('postgres', 'CREATE ROLE app_producer LOGIN');
$A->safe_psql('postgres', $grant_line);
is($A->safe_psql('postgres', qq{
	SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text) $EXT_FUNCS
	AND has_function_privilege('app_producer', p.oid, 'EXECUTE')}),
	$A->safe_psql('postgres', qq{
	SELECT string_agg(p.oid::regprocedure::text, ',' ORDER BY p.oid::regprocedure::text) $EXT_FUNCS
	AND has_function_privilege('zkg_produce', p.oid, 'EXECUTE')}),
	"doc/security.md's GRANT line grants what zk_grant('produce', ...) grants");
is(sqlstate_as($A, 'postgres', 'app_producer', "SELECT zk_enqueue('g_q', 'y')"), '00000',
	'app_producer enqueues');

# pg_monitor
$A->safe_psql('postgres', 'CREATE ROLE mon LOGIN; GRANT pg_monitor TO mon');
for my $db ('postgres', 'db2')
{
	for my $q ("SELECT count(*) FROM zk_locks", "SELECT count(*) FROM zk_queues",
		"SELECT count(*) FROM zk_leases", "SELECT count(*) FROM zk_elections",
		"SELECT count(*) FROM zk_semaphores", "SELECT count(*) FROM zk_lock_holders('tlock')",
		"SELECT state FROM zk_status()")
	{
		is(sqlstate_as($A, $db, 'mon', $q), '00000', "pg_monitor member in $db: $q");
	}
	is(sqlstate_as($A, $db, 'mon', "SELECT count(*) FROM zk_try_dequeue('g_q')"), '42501',
		"pg_monitor member in $db cannot dequeue");
}
my $hs = new_session($A, name => 'holder');
$hs->query_safe("SELECT zk_session_lock('held_by_tenant')");
is((as_role($A, 'postgres', 'mon', "SELECT count(*) FROM zk_lock_holders('held_by_tenant')"))[1],
	'1', 'pg_monitor member sees the holder');
$hs->quit;

# zk_grant and zk_revoke
my $r = one_shot($A, "SELECT zk_grant('nosuch', 'mallory')");
is($r->{sqlstate}, '22023', 'zk_grant of an unknown group: 22023');
like($r->{err}, qr/HINT:\s+The groups are: admin, arrive, campaign, consume, counter, election, lease, lock, monitor, produce, semaphore, wait\./,
	'its hint lists the groups');
is(one_shot($A, "SELECT zk_grant('lock', NULL)")->{sqlstate}, '22004', 'zk_grant to NULL: 22004');
is(one_shot($A, "SELECT zk_revoke('nosuch', 'mallory')")->{sqlstate}, '22023',
	'zk_revoke of an unknown group: 22023');
is($A->safe_psql('postgres', qq{
	SELECT count(*) $EXT_FUNCS AND has_function_privilege('mallory', p.oid, 'EXECUTE')}),
	'2', 'mallory still may execute only zk_privilege_groups() and zk_path()');
$A->safe_psql('postgres', "SELECT zk_revoke('consume', 'zkg_consume')");
is(sqlstate_as($A, 'postgres', 'zkg_consume', $op{consume}), '42501',
	'zk_revoke takes the group back');

# ---- 4. semaphore names that would be another semaphore's guard ----
my $hx = new_session($A, name => 'semx');
$hx->query_safe("SELECT zk_session_semaphore('x', 2)");
for my $q ("SELECT zk_semaphore('x-__lock__', 1)", "SELECT zk_try_semaphore('x-__lock__', 1)",
	"SELECT zk_session_semaphore('x-__lock__', 1)",
	"SELECT zk_try_session_semaphore('x-__lock__', 1)",
	"SELECT count(*) FROM zk_semaphore_holders('x-__lock__')",
	"SELECT zk_try_semaphore('other-__lock__', 1)")
{
	$r = one_shot($A, $q);
	is($r->{sqlstate}, '22023', "$q: 22023");
	like($r->{err}, qr/HINT:\s+Choose a name that does not end in "-__lock__"/, '... with a hint');
}
# x's guard (a container, maybe reaped by now) holds nothing, no guard of a
# guard, nothing for "other"
is(zk_count($zk, "$R/semaphores/x-__lock__"), 0, "nothing was created in x's guard");
is(exists01("$R/semaphores/x-__lock__-__lock__") + exists01("$R/semaphores/other-__lock__")
	  + exists01("$R/semaphores/other-__lock__-__lock__"), 0, 'nor beside it');
is(zk_count($zk, "$R/semaphores/x"), 1, "x's pool holds its one lease");
is(zk_get($zk, "$R/semaphores/x"), '2', "semaphore x's pool still says 2 leases");
is($A->safe_psql('postgres', "SELECT zk_try_semaphore('-__lock__', 1)"), 't',
	'"-__lock__" alone (the guard of no semaphore) is a valid name');
$hx->quit;

# ---- 5. zk_queue_release_cluster and a live cluster ----
my $bsys = $B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'r1')");
my $bs = new_session($B, name => 'Bconsumer');
$bs->query_safe('BEGIN');
is($bs->query_safe("SELECT body FROM zk_dequeue('rq', '5s')"), 'r1', 'B claims r1');
is(taken('rq'), 1, "B's claim is in ZooKeeper");
$r = one_shot($A, "SELECT zk_queue_release_cluster('$bsys')");
is($r->{sqlstate}, '55006', 'releasing the live cluster B fails with 55006');
like($r->{err}, qr/DETAIL:\s+Its run $bsys-[0-9a-f]{16} is registered/, '... naming its run');
like($r->{err}, qr/HINT:\s+Stop that cluster, or wait until its ZooKeeper session expires/,
	'... with a hint');
my ($brun) = grep { /^\Q$bsys\E-[0-9a-f]{16}$/ } zk_children($zk, "$R/runs");
ok(defined $brun && exists01("$R/runs/$brun/live"), "B's run is registered in ZooKeeper, live");
$brun //= "$bsys-0000000000000001";
like($r->{err}, qr/Its run \Q$brun\E is registered/, '... that run');
is(one_shot($A, "SELECT zk_queue_release_cluster('$brun')")->{sqlstate}, '55006',
	'naming the run fails too');
is(taken('rq'), 1, "B's claim is still there");
is($A->safe_psql('postgres', "SELECT count(*) FROM zk_try_dequeue('rq')"), '0',
	"A's consumer cannot take r1");
$bs->query_safe('COMMIT');
ok(wait_until(sub { zk_count($zk, "$R/queues/rq") == 3 }, 20), "B's COMMIT consumed r1 (entries, taken and delayed are left)");
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'r2')");
is($A->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_try_dequeue('rq', 10)"), 'r2',
	'r1 was committed once, by B alone');

# a dead cluster is released, as before
$A->safe_psql('postgres', "SELECT zk_enqueue('rq', 'r3')");
$bs = new_session($B, name => 'Bdoomed');
$bs->query_safe('BEGIN');
is($bs->query_safe("SELECT body FROM zk_dequeue('rq', '5s')"), 'r3', 'B claims r3');
$B->stop('immediate');
my $last;
ok(wait_until(sub {
	$last = one_shot($A, "SELECT zk_queue_release_cluster('$bsys')");
	$last->{sqlstate} eq '00000' }, 40),
	'once B is down and its session expired, the release works')
  or diag explain $last;
is($last->{out}, '1', 'it released one claim');
is($A->safe_psql('postgres', "SELECT string_agg(body, ',') FROM zk_try_dequeue('rq', 10)"), 'r3',
	"A's consumer takes r3");

done_testing();
