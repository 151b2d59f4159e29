
# 500_zk_auth.pl - ZooKeeper digest authentication and ACLs (issue 23).
#
# A cluster with zklock.auth_file (0600, zkl:secret) creates every node --
# lock contenders and their parents, queue items and claims, the txns and
# runs nodes, a lease's holder, an election's candidate, a semaphore's pool
# and lease -- with the ACL digest:zkl:<digest>:cdrwa, plus world:anyone:r
# on lock contenders, election candidates, their parents and the root
# (zklock.acl_world_read's default), private otherwise (issue 35).
# A kazoo client without credentials gets NoAuthError when it deletes a SQL
# holder's node, creates a transaction node or a claim, or writes a lease's,
# an election's or a semaphore's data; the SQL holders keep their locks and
# commit.  A kazoo client with the same credentials shares a lock and a
# queue with SQL both ways.  A second cluster with other credentials is
# refused at once with 42501 naming the path and the hint, zk_status counts
# it, and it leaves nothing in ZooKeeper.  An auth file with group access is
# refused (log line, zk_status 'auth failed', no session) and a reload after
# chmod 0600 connects.  Without credentials the worker logs a WARNING that
# the nodes are open to every client.  The session file is 0600 with a 0750
# data directory under umask 0002 and 0022.

use strict;
use warnings FATAL => 'all';

use File::Basename qw(dirname);
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();



my $good = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('auth', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.auth_file = '$good'\nzklock.elections = 'e1'\n");

my $kz = auth_kazoo($zk, 'zkl:secret');    # authenticated
my $anon = auth_kazoo($zk);              # no credentials
my ($digest) = ($kz->cmd('digest') // '') =~ /^digest (.+)$/;
ok(defined $digest, "the digest id of zkl:secret ($digest)");
my $ACL = "digest:$digest:cdrwa,world:anyone:r";
my $PRIV = "digest:$digest:cdrwa";

#
# 1. what SQL shows
#
my $st = zk_status($node);
is($st->{auth}, 'digest', "zk_status().auth is 'digest'");
is($st->{state}, 'connected', 'connected with the credentials');
$node->safe_psql('postgres', 'CREATE ROLE plain LOGIN');
my ($rc, $out, $err) = $node->psql('postgres', 'SHOW zklock.auth_file',
	extra_params => [ '-U', 'plain' ]);
like($err, qr/permission denied|must be superuser|privilege/i,
	'a non-superuser cannot SHOW zklock.auth_file');
($rc, $out, $err) = $node->psql('postgres', 'SHOW zklock.acl',
	extra_params => [ '-U', 'plain' ]);
isnt($rc, 0, 'nor zklock.acl');
# zk_status() is the monitor group's (granted to pg_monitor)
$node->safe_psql('postgres', 'GRANT pg_monitor TO plain');
($rc, $out, $err) = $node->psql('postgres', 'SELECT auth FROM zk_status()',
	extra_params => [ '-U', 'plain' ]);
is($out, 'digest', 'a non-superuser member of pg_monitor sees the scheme only');
ok($node->log_contains(qr/nodes are created with the ACL auth::cdrwa \(with world:anyone:r under locks,elections\)/),
	'the worker logs the default ACL with credentials');
ok(!$node->log_contains(qr/secret/), 'the password is nowhere in the server log');
($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET zklock.acl = 'bogus'");
like($err, qr/Entry 1 of zklock.acl \("bogus"\) is refused/, 'a bad zklock.acl is refused with an errdetail');
($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET zklock.acl = 'world:anyone:rx'");
like($err, qr/letters of cdrwa/, 'bad permission letters are refused');

#
# 2. nodes zklock creates carry the ACL
#
my $s1 = new_session($node, name => 's1');
my $s2 = new_session($node, name => 's2');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('a1')");
$node->safe_psql('postgres', "SELECT zk_enqueue('q1', 'one')");
$s2->query_safe('BEGIN');
is($s2->query_safe("SELECT payload FROM zk_dequeue('q1', '5s')"), '\x6f6e65',
	's2 dequeued the item (claim held)');
is($node->safe_psql('postgres', "SELECT zk_try_lease('l1', '10 min')"), 't', 'lease l1 taken');
my $s3 = new_session($node, name => 's3');
$s3->query_safe("SELECT zk_session_semaphore('m1', 2)");
ok(wait_until(sub { ($kz->cmd('ls /zklock/elections/e1') // '') =~ /__lock__/ }, 20),
	'the worker stands in election e1');

my %paths;
my ($holder) = ($kz->cmd('ls /zklock/locks/a1') // '') =~ /^ls (.+)$/;
$paths{'lock contender'} = "/zklock/locks/a1/$holder";
my ($item) = ($kz->cmd('ls /zklock/queues/q1/entries') // '') =~ /^ls (.+)$/;
$paths{'queue item'} = "/zklock/queues/q1/entries/$item";
my ($claim) = ($kz->cmd('ls /zklock/queues/q1/taken') // '') =~ /^ls (.+)$/;
$paths{'queue claim'} = "/zklock/queues/q1/taken/$claim";
my ($run) = ($kz->cmd('ls /zklock/runs') // '') =~ /^ls ([^,]+)/;
$paths{'run registration'} = "/zklock/runs/$run";
my ($cand) = ($kz->cmd('ls /zklock/elections/e1') // '') =~ /^ls ([^,]+)/;
$paths{'election candidate'} = "/zklock/elections/e1/$cand";
my ($sem) = ($kz->cmd('ls /zklock/semaphores/m1') // '') =~ /^ls ([^,]+)/;
$paths{'semaphore lease'} = "/zklock/semaphores/m1/$sem";
$paths{$_} = $_ foreach ('/zklock', '/zklock/locks', '/zklock/locks/a1',
	'/zklock/queues/q1/taken', '/zklock/txns', '/zklock/runs',
	'/zklock/leases/l1/lease_holder', '/zklock/semaphores/m1');
my %public = map { $_ => 1 } ('lock contender', 'election candidate', '/zklock',
	'/zklock/locks', '/zklock/locks/a1');
foreach my $what (sort keys %paths)
{
	my $want = $public{$what} ? $ACL : $PRIV;
	is($kz->cmd("acl $paths{$what}"), "acl $want", "ACL of $what ($paths{$what})");
}

#
# 3. an unauthenticated client is refused; SQL holders are unharmed
#
is($anon->cmd("delete $paths{'lock contender'}"), 'noauth', "no credentials: cannot delete s1's lock node");
is($anon->cmd("create /zklock/txns/0-0-0"), 'noauth', 'cannot create a transaction node');
is($anon->cmd("set /zklock/txns forged"), 'noauth', 'cannot write the txns node');
is($anon->cmd("create /zklock/queues/q1/taken/${item}x"), 'noauth', 'cannot create a claim under taken/');
is($anon->cmd("delete $paths{'queue claim'}"), 'noauth', "cannot delete s2's claim");
is($anon->cmd("set /zklock/leases/l1/lease_holder forged"), 'noauth', "cannot edit the lease's data");
is($anon->cmd("set $paths{'election candidate'} forged"), 'noauth', "cannot edit the election candidate's data");
is($anon->cmd("delete $paths{'election candidate'}"), 'noauth', 'cannot delete the election candidate');
is($anon->cmd("set /zklock/semaphores/m1 99"), 'noauth', "cannot edit the semaphore's data");
is($anon->cmd("ls /zklock/locks/a1"), "ls $holder", 'but may read');
is($node->safe_psql('postgres', "SELECT zk_is_leader('e1')"), 't', 'the cluster still leads e1');
my $r = $s1->query('COMMIT', 30);
is($r->{sqlstate}, '00000', 's1 commits its lock') or diag $r->{err};
$r = $s2->query('COMMIT', 30);
is($r->{sqlstate}, '00000', 's2 commits its dequeue') or diag $r->{err};
is($node->safe_psql('postgres', "SELECT zk_queue_length('q1')"), '0', 'the item is consumed');

#
# 4. an authenticated kazoo client shares locks and queues with SQL
#
is($kz->cmd('lock /zklock/locks/k1 5'), 'locked', 'kazoo (authenticated) takes k1');
is($kz->cmd('acl ' . ((($kz->cmd('ls /zklock/locks/k1') // '') =~ /^ls (.+)$/) ? "/zklock/locks/k1/$1" : '/none')),
	"acl $ACL", "kazoo's node has the same ACL (default_acl)");
is(try_lock_elsewhere($node, 'k1'), 'f', 'SQL cannot take k1 while kazoo holds it');
queue_request($zk, $s1, "SELECT zk_lock('k1', '20s')", '/zklock/locks/k1', 2, 'zk_lock queues behind kazoo');
is($kz->cmd('release /zklock/locks/k1'), 'released', 'kazoo releases');
$r = $s1->wait(15);
is($r->{sqlstate}, '00000', 'SQL gets k1 once kazoo released it') or diag $r->{err};
is($kz->cmd('lock /zklock/locks/k1 1', 30), 'timeout', 'kazoo waits while SQL holds k1');
$s1->query_safe('COMMIT');
is($kz->cmd('put /zklock/queues/kq from-kazoo'), 'ok', 'kazoo puts an item');
is($node->safe_psql('postgres', "SELECT convert_from(payload, 'UTF8') FROM zk_dequeue('kq', '5s')"),
	'from-kazoo', 'SQL dequeues the item kazoo put');
$node->safe_psql('postgres', "SELECT zk_enqueue('kq', 'from-sql')");
is($kz->cmd('get /zklock/queues/kq 10', 30), 'item from-sql', 'kazoo gets the item SQL enqueued');
is($kz->cmd('consume /zklock/queues/kq'), 'true', 'and consumes it');

#
# 5. a cluster with other credentials is refused at once, and leaves nothing
#
my $other = write_mode_file("$tmp/other.auth", "intruder:guess\n", 0600);
# the tree as zklock's identity reads it (the nodes are private to it):
# unauthenticated, the walk fails with NoAuth, and two such failures compare
# equal or not by the traceback's line, whatever ZooKeeper holds
my $before = do { local $ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret'; zk_tree($zk, '/zklock') };
unlike($before, qr/failed/, 'the tree before, read as zklock') or diag $before;
my $bad = zk_node('wrongcred', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.auth_file = '$other'\n");
my $t0 = time();
$r = one_shot($bad, "SELECT zk_lock('a1')", 30);
my $el = time() - $t0;
is($r->{sqlstate}, '42501', 'zk_lock on an existing lock fails with 42501');
like($r->{err}, qr/zookeeper refused access to "\/zklock\/locks\/a1"/, 'naming the path');
like($r->{err}, qr/HINT:.*zklock\.auth_file, zklock\.acl/, 'with the hint');
ok($el < 2.5, sprintf('promptly (%.2fs)', $el));
$t0 = time();
$r = one_shot($bad, "SELECT zk_lock('fresh')", 30);
$el = time() - $t0;
is($r->{sqlstate}, '42501', 'zk_lock on a new lock (its parent refused) fails with 42501')
  or diag $r->{err};
like($r->{err}, qr/zookeeper refused access to "\/zklock\/locks(\/fresh)?"/, 'naming the refused parent');
ok($el < 2.5, sprintf('promptly (%.2fs)', $el));
$r = one_shot($bad, "SELECT zk_try_semaphore('m1', 2)", 30);
is($r->{sqlstate}, '42501', 'a semaphore is refused with 42501 too') or diag $r->{err};
$r = one_shot($bad, "BEGIN; SELECT zk_enqueue('q1', 'x'); COMMIT", 30);
isnt($r->{sqlstate}, '00000', 'an enqueue does not commit') or diag $r->{out};
$st = zk_status($bad);
ok(($st->{noauth_refusals} // 0) >= 3, "zk_status().noauth_refusals counts them ($st->{noauth_refusals})");
is($st->{state}, 'connected', 'the session itself is fine (digest never fails the handshake)');
ok(wait_until(sub { $bad->log_contains(qr/refused access to "\/zklock\/runs/) }, 10),
	'its run registration is refused, with a WARNING');
sleep 1;
{
	# nothing new: ZooKeeper may meanwhile delete empty containers of the
	# parts before (its ContainerManager), so only additions count
	my $after = do { local $ENV{ZKLOCK_ZK_AUTH} = 'zkl:secret'; zk_tree($zk, '/zklock') };
	my %had = map { $_ => 1 } split /\n/, $before;
	my @new = grep { !$had{$_} } split /\n/, $after;
	unlike($after, qr/failed/, 'the tree after, read as zklock') or diag $after;
	is(join(' ', @new), '', 'it left nothing in ZooKeeper');
}
ok(!$bad->log_contains(qr/guess/), 'its password is not in its log');
$bad->stop;

#
# 6. no credentials: WARNING; a group-readable file is refused; chmod + reload
#
my $loose = write_mode_file("$tmp/loose.auth", "zkl:secret\n", 0640);
my $open = zk_node('noauth', $zk, session_timeout => '10s', connect_timeout => '3s');
ok($open->log_contains(qr/WARNING:.*nodes zklock creates in zookeeper are open to every zookeeper client/),
	'no credentials: the WARNING about open nodes');
is(zk_status_value($open, 'auth'), 'none', "zk_status().auth is 'none'");
$open->append_conf('postgresql.conf', "zklock.auth_file = '$loose'\n");
$open->reload;
$st = wait_for_state($open, 'auth failed', 20);
is($st->{state}, 'auth failed', "a group-readable auth file: zk_status().state 'auth failed'");
is($st->{auth}, 'digest (file refused)', 'zk_status().auth says the file is refused');
ok(!defined $st->{session_id}, 'and no session');
ok($open->log_contains(qr/refusing the zookeeper credentials file .*loose\.auth.*\n.*group or world access.*\n.*chmod 0600/),
	'the log says why, with the chmod hint');
sleep 1;
is(zk_status_value($open, 'state'), 'auth failed', 'it stays without a session');
$t0 = time();
$r = one_shot($open, "SELECT zk_lock('x')", 30);
$el = time() - $t0;
is($r->{sqlstate}, '42501', 'a lock request fails with 42501, not as a connection failure');
like($r->{err}, qr/no zookeeper session: its credentials were refused.*\n.*\n.*HINT:.*zklock\.auth_file/s,
	'saying why, with a hint about zklock.auth_file');
ok($el < 2.5, sprintf('at once (%.2fs)', $el));
chmod(0600, $loose);
$open->reload;
$st = wait_for_state($open, 'connected', 20);
is($st->{state}, 'connected', 'after chmod 0600 and a reload, connected');
is($st->{auth}, 'digest', 'with the credentials');
is(one_shot($open, "SELECT zk_try_lock('a1')")->{sqlstate}, '00000', 'and allowed on the protected nodes');
$open->stop;

#
# 7. the session file is 0600 whatever the umask and the directory's mode
#
foreach my $case ([ 0002, 0750 ], [ 0022, 0700 ])
{
	my ($mask, $dmode) = @$case;
	$node->stop;
	chmod($dmode, $node->data_dir);
	my $old = umask($mask);
	$node->start;
	umask($old);
	my $f = $node->data_dir . '/pgsql_tmp_zklock.session';
	ok(wait_until(sub { -e $f }, 30), 'the session file is written');
	my $mode = (stat($f))[2] & 07777;
	is(sprintf('%04o', $mode), '0600',
		sprintf('session file mode with umask %04o and a %04o data directory', $mask, $dmode));
}

$kz->quit;
$anon->quit;
done_testing();
