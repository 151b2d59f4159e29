
# 515_namespaces.pl - zklock.namespace decides which sessions meet on a name
# (issue 23).  Two clusters on one ZooKeeper, both with the default
# namespace ("$database"): A has databases app and billing (UTF8), B has a
# LATIN1 database app.
#
#   1. By default each database is its own namespace, named after it:
#      zk_path shows <root>/<kind>/<database>:<name>; app and billing on A
#      both hold lock "job" at once, while app on B (another cluster, same
#      database name, LATIN1) meets app on A; kazoo on zk_path's path waits
#      for the SQL holder.  A name written "app:job" in the root namespace
#      is another node (":" is escaped): no name reaches another namespace.
#   2. Queues, gates, arrivals, semaphores and leases are separated the same
#      way: an item enqueued in billing is not dequeued in app but is on B's
#      app; zk_queues lists only its own namespace's queues; a gate closed in
#      app is open in billing; arrivals in app do not count in billing.
#   3. A superuser shares a namespace with ALTER DATABASE ... SET: billing
#      then meets app's lock; the empty namespace is the root (kazoo's plain
#      paths).  A role that is not superuser cannot SET it (42501); an
#      ALTER ROLE ... SET by a superuser applies to that role's sessions.
#      A session that holds a lock cannot change its namespace (55006).
#   4. A claim in a namespaced queue is settled after a crash like any
#      other: the item comes back and is dequeued again.
#   5. zk_path of an unknown kind fails with 22023.
#   6. A SQL_ASCII database: a name holding the byte 0xFF (which would
#      make it look qualified, into another namespace) is refused with 22021
#      by every function; other high bytes still pass.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
# namespace => undef: the default, "$database"
my $A = zk_node('nsA', $zk, namespace => undef, conf => "zklock.elections = 'cron'\n");
my $B = zk_node('nsB', $zk, namespace => undef);
foreach my $db (qw(app billing))
{
	$A->safe_psql('postgres', "CREATE DATABASE $db");
	$A->safe_psql($db, 'CREATE EXTENSION zklock');
}
$B->safe_psql('postgres',
	"CREATE DATABASE app ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$B->safe_psql('app', 'CREATE EXTENSION zklock');

sub q1 { my ($node, $db, $sql) = @_; return $node->safe_psql($db, $sql); }

#
# 1. Locks, per database by default
#
is(q1($A, 'app', 'SHOW zklock.namespace'), '$database', 'the default namespace is "$database"');
is(q1($A, 'app', "SELECT zk_path('lock', 'job')"), '/zklock/locks/app:job', 'app: its lock path');
is(q1($A, 'billing', "SELECT zk_path('lock', 'job')"), '/zklock/locks/billing:job', 'billing: its lock path');
is(q1($B, 'app', "SELECT zk_path('lock', chr(233))"), '/zklock/locks/app:%C3%A9',
	'a LATIN1 database names its locks in UTF-8');
is(q1($A, 'app', "SELECT zk_path('lock', chr(233))"), '/zklock/locks/app:%C3%A9',
	'the same name from a UTF8 database is the same path');
is(q1($A, 'app', "SELECT zk_path('election', 'cron')"), '/zklock/elections/cron',
	"elections are the cluster's, outside namespaces");
ok(wait_until(sub { q1($A, 'app', "SELECT zk_is_leader('cron')") eq 't' }, 30),
	'app: zk_is_leader sees the cluster\'s election');
is(q1($A, 'billing', "SELECT count(*) FROM zk_election_candidates('cron')"), '1',
	'billing: zk_election_candidates lists the candidate under the root path');

my $sa = new_session($A, name => 'appA', dbname => 'app');
$sa->query_safe('BEGIN');
$sa->query_safe("SELECT zk_lock('job')");
my $sbill = new_session($A, name => 'billA', dbname => 'billing');
$sbill->query_safe('BEGIN');
is($sbill->query_safe("SELECT zk_try_lock('job')"), 't',
	"billing's lock job is not app's: both held at once");
my $sb = new_session($B, name => 'appB', dbname => 'app');
is($sb->query_safe("SELECT zk_try_lock('job')"), 'f',
	"database app of cluster B meets app of cluster A (same namespace)");
is(join(',', map { scalar(grep { /__lock__/ } zk_children($zk, $_)) } ('/zklock/locks/app:job', '/zklock/locks/billing:job')),
	'1,1', 'ZooKeeper: one holder node under each namespace');
is(q1($A, 'postgres', "SET zklock.namespace = ''; SELECT zk_path('lock', 'app:job')"),
	'/zklock/locks/app%3Ajob', 'a root-namespace name with ":" is escaped: no way into app');
is(q1($A, 'postgres', "SET zklock.namespace = ''; SELECT zk_try_lock('app:job')"), 't',
	"and it is another lock than app's job");

my $k = kazoo_client($zk);
is($k->cmd('lock /zklock/locks/app:job 1', 20), 'timeout', "kazoo on zk_path's path waits for the SQL holder");
$sa->query_safe('COMMIT');
is($k->cmd('lock /zklock/locks/app:job 10', 20), 'locked', 'and gets it once the SQL holder committed');
is($sb->query_safe("SELECT zk_try_lock('job')"), 'f', "then B's app waits for kazoo");
is($k->cmd('release /zklock/locks/app:job', 20), 'released', 'kazoo releases');
$sbill->query_safe('COMMIT');

#
# 2. Queues, gates, arrivals, semaphores, leases
#
q1($A, 'billing', "SELECT zk_enqueue('jobs', 'b1')");
is(q1($A, 'app', "SELECT count(*) FROM zk_try_dequeue('jobs')"), '0',
	"an item enqueued in billing is not app's");
is(q1($A, 'billing', "SELECT string_agg(queue || '=' || items, ',') FROM zk_queues"), 'jobs=1',
	"zk_queues in billing: billing's queue");
is(q1($A, 'app', "SELECT string_agg(queue || '=' || items, ',') FROM zk_queues"), 'jobs=0',
	"zk_queues in app: its own (empty) queue, not billing's item");
q1($A, 'app', "SELECT zk_enqueue('jobs', 'a1')");
is(q1($B, 'app', "SELECT body FROM zk_try_dequeue('jobs')"), 'a1',
	"app's item is dequeued by B's app, not billing's");
is(q1($A, 'billing', "SELECT body FROM zk_try_dequeue('jobs')"), 'b1', "billing gets its own");
ok(zk_exists($zk, '/zklock/queues/app:jobs') && zk_exists($zk, '/zklock/queues/billing:jobs'),
	'ZooKeeper: one queue node per namespace');

q1($A, 'app', "SELECT zk_gate_close('g')");
is(q1($A, 'app', "SELECT zk_gate_wait('g', '0')"), 'f', 'the gate is closed in app');
is(q1($A, 'billing', "SELECT zk_gate_wait('g', '0')"), 't', 'and open in billing');
is(q1($B, 'app', "SELECT zk_gate_wait('g', '0')"), 'f', "and closed in B's app");
q1($A, 'app', "SELECT zk_gate_open('g')");

q1($A, 'app', "SELECT zk_arrive('run', 'x')");
q1($B, 'app', "SELECT zk_arrive('run', 'y')");
is(q1($A, 'app', "SELECT zk_await('run', 2, '0')"), 't', "app's two arrivals (A and B)");
is(q1($A, 'billing', "SELECT zk_await('run', 1, '0')"), 'f', 'none in billing');
is(q1($A, 'billing', "SELECT count(*) FROM zk_arrivals('run')"), '0', 'zk_arrivals in billing: none');

is(q1($A, 'app', "SELECT zk_path('semaphore', 's')"), '/zklock/semaphores/app:s', 'a semaphore path');
my $ss = new_session($A, name => 'semA', dbname => 'app');
$ss->query_safe('BEGIN');
is($ss->query_safe("SELECT zk_try_semaphore('s', 1)"), 't', "app takes semaphore s's only lease");
is(q1($A, 'billing', "SELECT zk_try_semaphore('s', 1)"), 't', "billing's s is another semaphore");
is(q1($B, 'app', "SELECT zk_try_semaphore('s', 1)"), 'f', "B's app shares app's");
$ss->query_safe('COMMIT');

is(q1($A, 'app', "SELECT zk_try_lease('nightly', '1 hour')"), 't', 'app takes lease nightly');
is(q1($A, 'billing', "SELECT zk_try_lease('nightly', '1 hour')"), 't', "billing's nightly is another lease");
is(q1($B, 'app', "SELECT zk_try_lease('nightly', '1 hour')"), 'f', "B's app shares app's");
is(q1($A, 'billing', "SELECT string_agg(name, ',') FROM zk_leases"), 'nightly',
	"zk_leases in billing: billing's only");

#
# 3. Shared by a superuser's choice; nobody else can change it
#
q1($A, 'postgres', "ALTER DATABASE billing SET zklock.namespace = 'app'");
my $sa2 = new_session($A, name => 'appA2', dbname => 'app');
$sa2->query_safe('BEGIN');
$sa2->query_safe("SELECT zk_lock('job')");
is(q1($A, 'billing', "SELECT zk_path('lock', 'job') || ' ' || zk_try_lock('job')::text"),
	'/zklock/locks/app:job false', 'ALTER DATABASE billing SET zklock.namespace = app: billing meets app');
$sa2->query_safe('COMMIT');
is(q1($A, 'postgres', "SET zklock.namespace = ''; SELECT zk_path('queue', 'q')"), '/zklock/queues/q',
	'the empty namespace is the root');

q1($A, 'postgres', 'CREATE ROLE tenant LOGIN');
my ($rc, $out, $err) = $A->psql('app', "SET zklock.namespace = 'billing'",
	extra_params => [ '-U', 'tenant', '-v', 'VERBOSITY=verbose' ]);
like($err, qr/42501/, 'a role that is not superuser cannot SET zklock.namespace (42501)');
q1($A, 'postgres', "ALTER ROLE tenant SET zklock.namespace = 'tenant-ns'");
($rc, $out, $err) = $A->psql('app', "SELECT zk_path('lock', 'job')", extra_params => [ '-U', 'tenant' ]);
is($out, '/zklock/locks/tenant-ns:job', "ALTER ROLE ... SET by a superuser applies to the role's sessions");

my $sh = new_session($A, name => 'holder', dbname => 'postgres');
$sh->query_safe('BEGIN');
$sh->query_safe("SELECT zk_lock('held')");
my $r = $sh->query("SET zklock.namespace = 'other'");
is($r->{sqlstate}, '55006', 'a session holding a lock cannot change its namespace (55006)') or diag $r->{err};
$sh->query_safe('ROLLBACK');
is($sh->query_safe("SET zklock.namespace = 'other'; SELECT zk_path('lock', 'held')"),
	'/zklock/locks/other:held', 'once it let go it can');
$sh->quit;

#
# 4. A claim in a namespaced queue, settled after a crash
#
q1($A, 'app', "SELECT zk_enqueue('crashq', 'c1')");
my $sc = new_session($A, name => 'claimer', dbname => 'app');
$sc->query_safe('BEGIN');
is($sc->query_safe("SELECT body FROM zk_dequeue('crashq', '5s')"), 'c1', 'app claims c1');
is(scalar(zk_children($zk, '/zklock/queues/app:crashq/taken')), 1, 'ZooKeeper: its claim under app:crashq');
$A->stop('immediate');
$sc->kill_client;
$A->start;
wait_for_state($A, 'connected', 60);
ok(wait_until(sub { scalar(zk_children($zk, '/zklock/queues/app:crashq/taken')) == 0 }, 60),
	'after the crash the claim is released');
is(q1($A, 'app', "SELECT body FROM zk_dequeue('crashq', '10s')"), 'c1', 'and c1 is dequeued again');

#
# 5. Bad input
#
($rc, $out, $err) = $A->psql('app', "SELECT zk_path('table', 'x')", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
like($err, qr/22023/, 'zk_path of an unknown kind: 22023');


#
# 6. A SQL_ASCII database takes any bytes: a name starting with 0xFF must
#    not pass for one already qualified (0xFF, namespace, 0xFF, name) and
#    reach another namespace
#
$A->safe_psql('postgres',
	"CREATE DATABASE raw ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
$A->safe_psql('raw', 'CREATE EXTENSION zklock');
my $forged = "convert_from('\\xff'::bytea || 'app'::bytea || '\\xff'::bytea || 'job'::bytea, 'SQL_ASCII')";
foreach my $call ("zk_path('lock', $forged)", "zk_try_lock($forged)", "zk_enqueue($forged, 'x')",
	"zk_gate_open($forged)", "zk_try_lease($forged, '1 minute')")
{
	($rc, $out, $err) = $A->psql('raw', "SELECT $call", extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/22021/, "SQL_ASCII: $call with 0xFF in the name: 22021") or diag "$out $err";
	like($err, qr/must not contain the byte 0xff/, '... saying why');
}
ok(!zk_exists($zk, '/zklock/locks/app:job') || scalar(grep { /__lock__/ } zk_children($zk, '/zklock/locks/app:job')) == 0,
	"nothing reached app's lock job");
is(zk_exists($zk, '/zklock/queues/app:job/entries') ? zk_count($zk, '/zklock/queues/app:job/entries') : 0, 0,
	"nor app's queue job");
is(q1($A, 'raw', "SELECT zk_path('lock', convert_from('\\xe9'::bytea, 'SQL_ASCII'))"), '/zklock/locks/raw:%E9',
	'other high bytes still pass as they are');

$_->quit foreach ($sa, $sbill, $sb, $sa2, $ss);
$k->cmd('quit');
done_testing();
