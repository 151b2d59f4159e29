
# 517_namespace_claims.pl - a tenant cannot walk into another database's
# namespace (issue 35, item 3): the registry of namespace claims in
# ZooKeeper, <root>/namespaces/<namespace>@<system identifier>.
#
# Clusters A and B on one ZooKeeper, both with zklock.auth_file (one
# identity), default namespace '$database'.  bob and carol have CREATEDB and
# are not superusers.
#
# 1. bob creates database etl; a superuser installs zklock in it.  bob's
#    first call claims namespace etl: ZooKeeper holds one node
#    namespaces/etl@<sysid A> naming bob's database's OID, with the digest
#    ACL only (kazoo without credentials cannot read it).  bob commits an
#    item in queue "jobs".
# 2. The attack: bob renames etl to bobdb (it keeps the record 'etl') and
#    holds lock "job" from a session there,
#    carol creates a new etl and a superuser installs zklock there (it
#    records 'etl' too).  carol's calls fail with 55000 "namespace "etl"
#    belongs to another database of this cluster", the detail naming bob's
#    OID and database, the hint zk_set_database_namespace; peek, dequeue,
#    lock and zk_queues alike.  ZooKeeper: bob's item is still there,
#    unclaimed, bob is the one holder of etl:job, nothing of carol's
#    was created, the registry still has one node.  Before: carol peeked
#    and took bob's item.
# 3. A superuser shares on purpose: zk_set_database_namespace('etl') in
#    carol's etl adds its OID to the claim (read back in ZooKeeper); carol's
#    next session sees bob's item.  With takeover => true the claim names
#    carol's database alone, and bob's next session is refused; bob's
#    database joins again.
# 4. DROP DATABASE leaves its claim: a new database of the same name is
#    refused (the detail says the owner was dropped) until a superuser
#    takes the namespace over.
# 5. Cluster B, a database etl of its own: its claim is another node
#    (etl@<sysid B>), and it shares namespace etl with A's databases by
#    design: it sees bob's item.
# 6. Nodes zklock did not write are not trusted: data without this
#    cluster's MAC (written by a kazoo client) and a claim whose ACL was
#    opened give 55000 "does not trust", a WARNING in the log; a takeover
#    replaces the node (ACL included).
# 7. The registry holds exactly one node per (namespace, cluster) used.
# 8. A namespace set by ALTER DATABASE ... SET zklock.namespace is claimed
#    for that database too: carol's new database named like it is refused
#    (55000); a second database set to it by a superuser shares it.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

# zkq.py (zk_count, zk_children) reads zklock's private nodes with the clusters' identity
$ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret';
my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();
my $auth = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $conf = "zklock.auth_file = '$auth'\n";
my $A = zk_node('nsclA', $zk, namespace => undef, conf => $conf);
my $B = zk_node('nsclB', $zk, namespace => undef, conf => $conf);
my $su = $A->safe_psql('postgres', 'SELECT current_user');
my $kz = auth_kazoo($zk, 'zkl:secret');
my $anon = auth_kazoo($zk);
my ($digest) = ($kz->cmd('digest') // '') =~ /^digest (.+)$/;
my $sysA = $A->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
my $sysB = $B->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');
isnt($sysA, $sysB, 'two clusters');

# Run $sql in $db of $node as $user (the superuser by default).  Returns
# { sqlstate, out, err }.
sub run_on
{
	my ($node, $db, $sql, $user) = @_;
	return sqlstate_psql($node, $db, $sql, $user // $su, timeout => 60);
}
sub run { return run_on($A, @_); }

sub install { return install_for_tenant(@_); }    # (ZkLockTest.pm)

sub oid_of { return $A->safe_psql('postgres', "SELECT oid FROM pg_database WHERE datname = '$_[0]'"); }
sub claim { my ($ns, $sys) = @_; return $kz->cmd("read /zklock/namespaces/$ns\@" . ($sys // $sysA)); }
sub registry { return $kz->cmd('ls /zklock/namespaces'); }

$A->safe_psql('postgres', 'CREATE ROLE bob LOGIN CREATEDB; CREATE ROLE carol LOGIN CREATEDB');

#
# 1. bob's database etl claims namespace etl
#
my $r = run('postgres', 'CREATE DATABASE etl', 'bob');
is($r->{sqlstate}, '00000', 'bob (CREATEDB) creates database etl') or diag $r->{err};
install($A, 'etl', 'bob');
my $bob_oid = oid_of('etl');
is(registry(), 'nonode', 'nothing is claimed before a call uses the namespace');
$r = run('etl', "BEGIN; SELECT zk_enqueue('jobs', 'bob-secret'); COMMIT", 'bob');
is($r->{sqlstate}, '00000', 'bob commits an item in queue jobs') or diag $r->{err};
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'ZooKeeper: bob\'s item under etl:jobs');
is(registry(), "ls etl\@$sysA", 'ZooKeeper: the registry holds one claim, etl@<sysid>');
like(claim('etl'), qr/^data \{"v":1,"datoids":"$bob_oid","datname":"etl","mac":"[0-9a-f]{64}"\}$/,
	'it names bob\'s database (OID, name) and carries the cluster\'s MAC');
is($kz->cmd("acl /zklock/namespaces/etl\@$sysA"), "acl digest:$digest:cdrwa", 'its ACL is zklock\'s identity only');
is($anon->cmd("read /zklock/namespaces/etl\@$sysA"), 'noauth', 'kazoo without credentials cannot read it');
is($kz->cmd('acl /zklock/namespaces'), "acl digest:$digest:cdrwa", 'nor create or delete under the registry');

#
# 2. The attack: rename, a new etl of carol's, installed by a superuser
#
$r = run('postgres', 'ALTER DATABASE etl RENAME TO bobdb', 'bob');
is($r->{sqlstate}, '00000', 'bob renames etl to bobdb (it keeps namespace etl)') or diag $r->{err};
my $bob = new_session($A, name => 'bob', dbname => 'bobdb', user => 'bob');
like($bob->query_safe("SELECT zk_session_lock('job')"), qr/^\d+$/, 'bob holds lock job (in namespace etl)');
$r = run('postgres', 'CREATE DATABASE etl', 'carol');
is($r->{sqlstate}, '00000', 'carol (CREATEDB) creates a new database etl') or diag $r->{err};
install($A, 'etl', 'carol');
my $carol_oid = oid_of('etl');
is(run('etl', "SELECT namespace FROM zk.zk_database_namespace")->{out}, 'etl',
	'CREATE EXTENSION recorded namespace etl in carol\'s database too');
is(run('etl', "SELECT zk_path('queue', 'jobs')", 'carol')->{out}, '/zklock/queues/etl:jobs',
	'zk_path still computes the path (it sends nothing to ZooKeeper)');

my %calls = (
	'peek' => "SELECT body FROM zk_queue_peek('jobs')",
	'dequeue' => "BEGIN; SELECT body FROM zk_try_dequeue('jobs'); COMMIT",
	'lock' => "SELECT zk_try_session_lock('job')",
	'enqueue' => "BEGIN; SELECT zk_enqueue('jobs', 'carol-item'); COMMIT");
for my $c (sort keys %calls)
{
	$r = run('etl', $calls{$c}, 'carol');
	is($r->{sqlstate}, '55000', "carol's $c fails with 55000") or diag "$r->{out} $r->{err}";
	unlike($r->{out}, qr/bob-secret|^1$/, "... and shows nothing of bob's");
}
for my $c ("SELECT count(*) FROM zk_queues", "SELECT count(*) FROM zk_lock_holders('job')")
{
	$r = run('etl', $c);
	is($r->{sqlstate}, '55000', "a superuser's session in carol's database: $c fails with 55000 too")
	  or diag "$r->{out} $r->{err}";
}
$r = run('etl', $calls{peek}, 'carol');
like($r->{err}, qr/ERROR:  55000: namespace "etl" belongs to another database of this cluster/, 'the message says why');
like($r->{err}, qr/DETAIL:.*OID $bob_oid \(now named "bobdb"\).*this database \("etl", OID $carol_oid\)/,
	'the detail names the database that has it, by OID and name');
like($r->{err}, qr/HINT:.*zk\.zk_set_database_namespace\('name'\).*zk\.zk_set_database_namespace\('etl', takeover => true\)/,
	'the hint says what a superuser does');
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'ZooKeeper: bob\'s item is still there');
is(zk_count($zk, '/zklock/queues/etl:jobs/taken'), 0, '... and nobody claimed it');
is(scalar(grep { /__lock__/ } zk_children($zk, '/zklock/locks/etl:job')), 1, 'bob is the one holder of etl:job');
is(registry(), "ls etl\@$sysA", 'the registry still holds one claim');
like(claim('etl'), qr/"datoids":"$bob_oid"/, '... naming bob\'s database alone');
is($bob->query_safe("SELECT zk_lock_token('job') IS NOT NULL"), 't', 'bob still holds his lock');
is(run('bobdb', "SELECT count(*) FROM zk_queue_peek('jobs')", 'bob')->{out}, '1',
	'a new session of bob\'s renamed database still works in etl');

#
# 3. A superuser shares the namespace on purpose, or takes it over
#
$r = run('etl', "SELECT zk.zk_set_database_namespace('etl')");
is($r->{sqlstate}, '00000', 'a superuser records etl on purpose in carol\'s database') or diag $r->{err};
like(claim('etl'), qr/"datoids":"$bob_oid,$carol_oid"/, 'ZooKeeper: the claim names both databases');
is(run('etl', "SELECT body FROM zk_queue_peek('jobs')", 'carol')->{out}, 'bob-secret',
	'carol\'s next session shares namespace etl: she sees the item');

$r = run('etl', "SELECT zk.zk_set_database_namespace('etl', takeover => true)");
is($r->{sqlstate}, '00000', 'a superuser takes namespace etl over for carol\'s database') or diag $r->{err};
like(claim('etl'), qr/"datoids":"$carol_oid"/, 'ZooKeeper: the claim names carol\'s database alone');
is(run('etl', "SELECT count(*) FROM zk_queue_peek('jobs')", 'carol')->{out}, '1', 'carol is in etl');
$r = run('bobdb', "SELECT count(*) FROM zk_queue_peek('jobs')", 'bob');
is($r->{sqlstate}, '55000', 'bob\'s next session is refused now') or diag $r->{err};
like($r->{err}, qr/OID $carol_oid \(now named "etl"\)/, '... naming carol\'s database');
$r = run('bobdb', "SELECT zk.zk_set_database_namespace('etl')");
is($r->{sqlstate}, '00000', 'bob\'s database joins again') or diag $r->{err};
is($bob->query_safe("BEGIN; SELECT body FROM zk_try_dequeue('jobs'); COMMIT"), 'bob-secret',
	'bob\'s session (connected all along) takes his own item');

#
# 4. DROP DATABASE leaves a claim: refused until taken over
#
$A->safe_psql('postgres', 'CREATE DATABASE tmpns');
install($A, 'tmpns', 'carol');
my $old_oid = oid_of('tmpns');
is(run('tmpns', "SELECT zk_try_lock('x')", 'carol')->{out}, 't', 'tmpns claims namespace tmpns');
$A->safe_psql('postgres', 'DROP DATABASE tmpns');
$A->safe_psql('postgres', 'CREATE DATABASE tmpns');
install($A, 'tmpns', 'carol');
$r = run('tmpns', "SELECT zk_try_lock('x')", 'carol');
is($r->{sqlstate}, '55000', 'a new database of the dropped one\'s name is refused') or diag $r->{err};
like($r->{err}, qr/DETAIL:.*OID $old_oid, which no longer exists \(dropped\)/, '... saying the owner was dropped');
is(run('tmpns', "SELECT zk.zk_set_database_namespace(takeover => true)")->{out}, 'tmpns',
	'a superuser takes it over');
is(run('tmpns', "SELECT zk_try_lock('x')", 'carol')->{out}, 't', 'the new tmpns is in namespace tmpns');
is(run('tmpns', "SELECT zk.zk_set_database_namespace('x', true)", 'carol')->{sqlstate}, '42501',
	'carol cannot take anything over (42501)');
is(run('tmpns', "SELECT zk.zk_namespace_claim('etl', true)", 'carol')->{sqlstate}, '42501',
	'nor call zk_namespace_claim (42501)');

#
# 5. Another cluster's database etl shares namespace etl by design
#
$B->safe_psql('postgres', 'CREATE ROLE bob LOGIN');
$B->safe_psql('postgres', 'CREATE DATABASE etl');
install($B, 'etl', 'bob');
$r = run_on($B, 'etl', "BEGIN; SELECT zk_enqueue('jobs', 'from-b'); COMMIT", 'bob');
is($r->{sqlstate}, '00000', 'cluster B\'s database etl enqueues') or diag $r->{err};
$r = run_on($B, 'etl', "SELECT body FROM zk_queue_peek('jobs')", 'bob');
is($r->{out}, 'from-b', 'cluster B\'s database etl is in namespace etl') or diag $r->{err};
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'ZooKeeper: the item B enqueued is in etl:jobs');
is(run('etl', "SELECT body FROM zk_queue_peek('jobs')", 'carol')->{out}, 'from-b', 'A\'s etl sees it: shared across clusters');
like(claim('etl', $sysB), qr/"datoids":"\d+","datname":"etl"/, 'B\'s claim is a node of its own, etl@<sysid B>');

#
# 6. Nodes zklock did not write are not trusted
#
is($kz->cmd("create /zklock/namespaces/forged\@$sysA"), 'ok', 'another client creates a claim of namespace forged');
my $forged_oid = $A->safe_psql('postgres', "CREATE DATABASE forged; SELECT oid FROM pg_database WHERE datname = 'forged'");
is($kz->cmd("set /zklock/namespaces/forged\@$sysA {\"v\":1,\"datoids\":\"$forged_oid\",\"datname\":\"forged\"}"), 'ok',
	'... naming the database forged, without a MAC');
install($A, 'forged', 'carol');
$r = run('forged', "SELECT zk_try_lock('x')", 'carol');
is($r->{sqlstate}, '55000', 'the forged claim is not trusted (55000)') or diag $r->{err};
like($r->{err}, qr/zklock does not trust the claim of namespace "forged" in zookeeper.*\n.*DETAIL:.*MAC/,
	'... saying why');
ok($A->log_contains(qr/WARNING:.*zklock does not trust the namespace claim \/zklock\/namespaces\/forged/),
	'a WARNING in the log');
is(run('forged', "SELECT zk.zk_set_database_namespace(takeover => true)")->{sqlstate}, '00000',
	'a superuser\'s takeover replaces it');
like(claim('forged'), qr/"mac":"[0-9a-f]{64}"/, 'ZooKeeper: zklock\'s claim, with its MAC');
is(run('forged', "SELECT zk_try_lock('x')", 'carol')->{out}, 't', 'the database works');

# a claim of zklock's whose ACL another client opened
$A->safe_psql('postgres', 'CREATE DATABASE opened');
install($A, 'opened', 'carol');
is(run('opened', "SELECT zk_try_lock('x')", 'carol')->{out}, 't', 'database opened claims its namespace');
is($kz->cmd("setacl /zklock/namespaces/opened\@$sysA open"), 'ok', 'a client opens the claim\'s ACL');
$A->safe_psql('postgres', 'DROP DATABASE opened');
$A->safe_psql('postgres', 'CREATE DATABASE opened');
install($A, 'opened', 'carol');
$r = run('opened', "SELECT zk_try_lock('x')", 'carol');
is($r->{sqlstate}, '55000', 'a claim with an open ACL is not trusted (55000)') or diag $r->{err};
like($r->{err}, qr/DETAIL:.*ACL.*world:anyone/, '... the detail names the ACL entry');
is(run('opened', "SELECT zk.zk_set_database_namespace(takeover => true)")->{sqlstate}, '00000',
	'a takeover replaces it');
is($kz->cmd("acl /zklock/namespaces/opened\@$sysA"), "acl digest:$digest:cdrwa", 'with zklock\'s ACL');

#
# 7. One node per namespace and cluster used
#
is(registry(), 'ls ' . join(',', sort("etl\@$sysA", "etl\@$sysB", "forged\@$sysA", "opened\@$sysA", "tmpns\@$sysA")),
	'ZooKeeper: the registry holds one claim per namespace and cluster used');
is(zk_count($zk, '/zklock/namespaces'), 5, '... and nothing under them');

#
# 8. A namespace set by ALTER DATABASE ... SET is claimed too (994 part E):
#    a database named like it cannot walk into it; a second database set to
#    it shares it on purpose
#
$A->safe_psql('postgres', 'CREATE DATABASE dave8');
install($A, 'dave8', 'bob');
$A->safe_psql('postgres', "ALTER DATABASE dave8 SET zklock.namespace = 'cfg'");
my $dave_oid = oid_of('dave8');
$r = run('dave8', "BEGIN; SELECT zk_enqueue('jobs', 'cfg-secret'); COMMIT", 'bob');
is($r->{sqlstate}, '00000', 'bob commits an item in dave8, set to namespace cfg') or diag $r->{err};
is(zk_count($zk, '/zklock/queues/cfg:jobs/entries'), 1, 'ZooKeeper: the item under cfg:jobs');
like(claim('cfg') // '', qr/"datoids":"$dave_oid"/, 'the registry gives namespace cfg to dave8');
$r = run('postgres', 'CREATE DATABASE cfg', 'carol');
is($r->{sqlstate}, '00000', 'carol (CREATEDB) creates a database named cfg') or diag $r->{err};
install($A, 'cfg', 'carol');
for my $c ('peek', 'dequeue')
{
	$r = run('cfg', $calls{$c}, 'carol');
	is($r->{sqlstate}, '55000', "carol's $c in her database cfg fails with 55000") or diag "$r->{out} $r->{err}";
	unlike($r->{out}, qr/cfg-secret/, '... and shows nothing of dave8\'s');
}
is(zk_count($zk, '/zklock/queues/cfg:jobs/entries'), 1, 'ZooKeeper: the item is still there');
is(zk_count($zk, '/zklock/queues/cfg:jobs/taken'), 0, '... unclaimed');
$A->safe_psql('postgres', 'CREATE DATABASE erin8');
install($A, 'erin8', 'bob');
$A->safe_psql('postgres', "ALTER DATABASE erin8 SET zklock.namespace = 'cfg'");
my $erin_oid = oid_of('erin8');
is(run('erin8', "SELECT body FROM zk_queue_peek('jobs')", 'bob')->{out}, 'cfg-secret',
	'a second database set to namespace cfg shares it on purpose');
like(claim('cfg') // '', qr/"datoids":"$dave_oid,$erin_oid"/, 'the claim names both');
$r = run('cfg', $calls{peek}, 'carol');
is($r->{sqlstate}, '55000', 'carol is still refused') or diag "$r->{out} $r->{err}";
is(run('erin8', "BEGIN; SELECT body FROM zk_try_dequeue('jobs'); COMMIT", 'bob')->{out}, 'cfg-secret',
	'the item is consumed once, in erin8');

$bob->quit;
$kz->quit;
$anon->quit;
$A->stop;
$B->stop;
zk_stop($zk);
done_testing();
