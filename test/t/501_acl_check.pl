
# 501_acl_check.pl - nodes found already there, and private nodes (issue 35,
# items 5 and 6).
#
# 1. A kazoo client without credentials creates /zklock, /zklock/locks and
#    /zklock/locks/pre open (world:anyone:cdrwa) before the cluster starts.
#    The cluster (zklock.auth_file) logs a WARNING with a hint for the root
#    and locks at start, zk_status().acl_problems counts them and
#    acl_problem names one; the first zk_lock('pre') of the session finds
#    /zklock/locks/pre open too (counted, logged).  The ACLs are unchanged
#    (repair is off).
# 2. zklock.acl_repair = on and a reload: the worker sets the ACL of the
#    root and of locks (read back through kazoo: digest:cdrwa plus
#    world:anyone:r, the public ACL of locks), and of locks/pre once a lock
#    uses it; the anonymous client can no longer delete a holder's node
#    there.  acl_problems is back to 0.
# 3. Private by default: a kazoo client without credentials cannot read a
#    queue item's data, list the queue's entries nor read a lease's holder
#    text, but can list a lock's contenders and read an election's
#    candidates; an authenticated client reads the item.
# 4. zklock.acl_world_read = '': a new lock's contenders are private too.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $tmp = PostgreSQL::Test::Utils::tempdir();



my $anon = auth_kazoo($zk);
my $kz = auth_kazoo($zk, 'zkl:secret');
my ($digest) = ($kz->cmd('digest') // '') =~ /^digest (.+)$/;
my $PUB = "digest:$digest:cdrwa,world:anyone:r";
my $PRIV = "digest:$digest:cdrwa";

#
# 1. open nodes found at start: WARNING, counted, not repaired
#
is($anon->cmd("create $_"), 'ok', "an unauthenticated client creates $_ first")
  foreach ('/zklock', '/zklock/locks', '/zklock/locks/pre');
is($anon->cmd('acl /zklock/locks'), 'acl world:anyone:cdrwa', 'open to everyone');

my $good = write_mode_file("$tmp/zk.auth", "zkl:secret\n", 0600);
my $node = zk_node('aclcheck', $zk,
	session_timeout => '10s',
	connect_timeout => '3s',
	conf => "zklock.auth_file = '$good'\nzklock.elections = 'e1'\n");

ok( wait_until(
		sub {
			$node->log_contains(
				qr/WARNING:.*zookeeper node "\/zklock\/locks" lets other clients create or delete under it \(ACL entry world:anyone:cdrwa\)/
			);
		},
		20),
	'a WARNING names /zklock/locks and the open entry');
ok($node->log_contains(qr/WARNING:.*zookeeper node "\/zklock" lets other clients/),
	'and the root');
ok($node->log_contains(qr/HINT:.*zklock\.acl_repair/), 'with a hint naming zklock.acl_repair');
ok(wait_until(sub { (zk_status($node)->{acl_problems} // 0) >= 2 }, 10),
	'zk_status().acl_problems counts them');
like(zk_status($node)->{acl_problem} // '', qr{^/zklock}, 'acl_problem names one');

is(one_shot($node, "SELECT zk_try_lock('pre')")->{sqlstate}, '00000', 'a lock under the open locks/pre');
ok( wait_until(
		sub { $node->log_contains(qr/zookeeper node "\/zklock\/locks\/pre" lets other clients/) },
		10),
	'its parent is checked on first use, and found open');
ok(wait_until(sub { (zk_status($node)->{acl_problems} // 0) >= 3 }, 10), 'and counted');
is($anon->cmd('acl /zklock/locks/pre'), 'acl world:anyone:cdrwa', 'repair is off: the ACL stays');

#
# 2. zklock.acl_repair: the ACLs are set to zklock's own
#
$node->safe_psql('postgres', 'ALTER SYSTEM SET zklock.acl_repair = on');
$node->reload;
ok( wait_until(sub { ($kz->cmd('acl /zklock/locks') // '') eq "acl $PUB" }, 20),
	'repair on: /zklock/locks gets the public ACL (read through kazoo)')
  or diag $kz->cmd('acl /zklock/locks');
is($kz->cmd('acl /zklock'), "acl $PUB", 'and the root');
ok($node->log_contains(qr/LOG:.*repaired the ACL of zookeeper node "\/zklock\/locks"/),
	'the repair is logged');
my $s1 = new_session($node, name => 's1');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('pre')");
ok(wait_until(sub { ($kz->cmd('acl /zklock/locks/pre') // '') eq "acl $PUB" }, 20),
	'locks/pre is repaired once a lock uses it');
my ($holder) = ($kz->cmd('ls /zklock/locks/pre') // '') =~ /^ls (\S+)$/;
ok(defined $holder, "s1 holds pre ($holder)");
is($anon->cmd("delete /zklock/locks/pre/$holder"), 'noauth',
	"the unauthenticated client can no longer delete the holder's node");
is($s1->query('COMMIT', 30)->{sqlstate}, '00000', 's1 commits its lock');
ok(wait_until(sub { (zk_status($node)->{acl_problems} // -1) == 0 }, 10),
	'acl_problems is 0 after the repairs');

#
# 3. private by default: items, lease data; public: lock contenders, candidates
#
$node->safe_psql('postgres', "SELECT zk_enqueue('q1', 'secret-payload')");
is($node->safe_psql('postgres', "SELECT zk_try_lease('l1', '10 min', 'secret-holder')"),
	't', 'lease l1 taken with a holder text');
my ($item) = ($kz->cmd('ls /zklock/queues/q1/entries') // '') =~ /^ls (\S+)$/;
ok(defined $item, "the item is there ($item)");
is($anon->cmd("read /zklock/queues/q1/entries/$item"), 'noauth',
	'no credentials: cannot read the queue item');
is($anon->cmd('ls /zklock/queues/q1/entries'), 'noauth', "nor list the queue's entries");
is($anon->cmd('read /zklock/leases/l1/lease_holder'), 'noauth', "nor read the lease's holder");
is($kz->cmd("read /zklock/queues/q1/entries/$item"), 'data secret-payload',
	'an authenticated client reads the item');
is($kz->cmd("acl /zklock/queues/q1/entries/$item"), "acl $PRIV", 'the item has the private ACL');
is($kz->cmd('acl /zklock/leases/l1/lease_holder'), "acl $PRIV", 'the lease holder too');
my ($run) = ($kz->cmd('ls /zklock/runs') // '') =~ /^ls ([^,]+)/;
is($kz->cmd("acl /zklock/runs/$run"), "acl $PRIV", 'and the run registration');

$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('a1')");
($holder) = ($kz->cmd('ls /zklock/locks/a1') // '') =~ /^ls (\S+)$/;
is($anon->cmd('ls /zklock/locks/a1'), "ls $holder", 'but may list a lock\'s contenders');
like($anon->cmd("read /zklock/locks/a1/$holder"), qr/^data /, 'and read them');
ok(wait_until(sub { ($anon->cmd('ls /zklock/elections/e1') // '') =~ /^ls .*__lock__/ }, 20),
	"and list an election's candidates");
$s1->query_safe('COMMIT');

#
# 4. zklock.acl_world_read = '': contenders are private too
#
$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.acl_world_read = ''");
$node->reload;
ok(wait_until(sub { $node->log_contains(qr/nodes are created with the ACL auth::cdrwa$/m) }, 20),
	'the worker logs the private ACL');
$s1->query_safe('BEGIN');
$s1->query_safe("SELECT zk_lock('a2')");
($holder) = ($kz->cmd('ls /zklock/locks/a2') // '') =~ /^ls (\S+)$/;
is($kz->cmd("acl /zklock/locks/a2/$holder"), "acl $PRIV", 'a new contender is private');
is($anon->cmd("read /zklock/locks/a2/$holder"), 'noauth', 'unreadable without credentials');
$s1->query_safe('COMMIT');
my ($rc, $out, $err) = $node->psql('postgres', "ALTER SYSTEM SET zklock.acl_world_read = 'locks,tables'");
like($err, qr/"tables" is not a kind of zklock node/, 'an unknown kind is refused');

$s1->quit;
$kz->quit;
$anon->quit;
done_testing();
