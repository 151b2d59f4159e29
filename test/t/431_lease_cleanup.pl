
# 431_lease_cleanup.pl - the worker removes the nodes of leases that ended
# long ago (issue 35: a role that takes leases of ever new names must not
# leave one persistent node per name in the shared ZooKeeper), counted
# through ZooKeeper itself.
#
#   1. 100 leases of 1 s, zklock.lease_cleanup_grace 2 s: every holder and
#      name node goes; kazoo's own ended lease too; an empty name node
#      left long ago too.
#   2. What stays: a lease renewed all along; a lease whose lock kazoo
#      holds (the sweep only decides under the lock) until kazoo lets go;
#      a holder that is not a lease, one of another format version, and an
#      ended lease whose ACL lets another identity write it.
#   3. Afterwards kazoo's NonBlockingLease and zk_try_lease take names the
#      sweep removed.  zk_lease_release ends one's own lease early.
#   4. More names than zklock.max_children (a bound on one tenant's own
#      names in a listing, not on the directory every namespace shares):
#      still removed.

use strict;
use warnings FATAL => 'all';

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('sweepA', $zk,
	conf => "zklock.lease_cleanup_interval = '1s'\nzklock.lease_cleanup_grace = '2s'\n");
my $LEASES = '/zklock/leases';

sub sql
{
	my ($sql) = @_;
	return $A->safe_psql('postgres', $sql);
}

sub kazoo_lease_client { return kazoo_driver($zk, 'lease_kazoo.py'); }

# run a python snippet with kazoo connected as zk (dies if it fails)
sub kazoo_py
{
	my ($code) = @_;
	my ($out, $err) = ('', '');
	my $py = "from kazoo.client import KazooClient\n"
	  . "from kazoo.security import make_digest_acl, Permissions, ACL, Id\n"
	  . "zk = KazooClient(hosts='$zk->{hosts}'); zk.start(timeout=10)\n"
	  . "$code\nzk.stop(); zk.close()\n";
	IPC::Run::run([ $ZkLockTest::PYTHON, '-c', $py ], '>', \$out, '2>', \$err)
	  or die "kazoo snippet failed: $err";
	return $out;
}

my $k = kazoo_lease_client();
my $ended = '{"version": 1, "holder": "gone", "end": "2001-01-01T00:00:00"}';

#
# the nodes that must stay, and an empty name node that must go
#
ok(defined zkq($zk, 'create', "$LEASES/fgarbage/lease_holder", 'not a lease'), 'a holder that is not a lease');
ok(defined zkq($zk, 'create', "$LEASES/fv2/lease_holder",
		'{"version": 2, "holder": "x", "end": "2001-01-01T00:00:00"}'), 'a holder of format version 2');
kazoo_py(qq{acl = [ACL(Permissions.READ, Id('world', 'anyone')), make_digest_acl('mallory', 'pw', all=True)]
zk.ensure_path('$LEASES/facl')
zk.create('$LEASES/facl/lease_holder', b'$ended', acl=acl)});
like(kazoo_py("print(zk.get_acls('$LEASES/facl/lease_holder')[0])"), qr/mallory/,
	"an ended lease whose ACL lets mallory write it");
ok(defined zkq($zk, 'create', "$LEASES/fempty"), 'an empty name node');

#
# 1. many names used once
#
my $t0 = time();
is(sql(q{DO $$ BEGIN FOR i IN 1..100 LOOP
  IF NOT zk_try_lease('c' || i, '1 second') THEN RAISE 'lease c% refused', i; END IF;
END LOOP; END $$; SELECT 'ok'}), 'ok', '100 leases of 1 s taken');
note sprintf('took 100 leases in %.1f s', time() - $t0);
is(sql("SELECT zk_try_lease('renewed', '2 seconds', 'me')"), 't', "'renewed' taken for 2 s");
is($k->cmd("lease $LEASES/kz 1 py"), 'true', "kazoo takes 'kz' for 1 s");
is($k->cmd("lock $LEASES/c100"), 'locked', "kazoo holds the lock of 'c100'");
my $before = zk_count($zk, $LEASES);
cmp_ok($before, '>=', 2 * 100 + 2 + 2 + 2 + 2 + 2 + 1, "ZooKeeper holds every lease's nodes ($before)");

# 2 + 2 + 2 ('renewed', fgarbage, fv2), 2 (facl), 3 (c100 and kazoo's lock node)
my $want = 11;
my $ok = 0;
my $deadline = time() + 30;
while (time() < $deadline)
{
	sql("SELECT zk_try_lease('renewed', '2 seconds', 'me')");
	if (zk_count($zk, $LEASES) == $want) { $ok = 1; last; }
	sleep 0.5;
}
ok($ok, sprintf('the ended leases are gone within %.0f s: %d nodes left of %d', time() - $t0,
	zk_count($zk, $LEASES), $before)) or diag zk_tree($zk, $LEASES);
ok(!zk_exists($zk, "$LEASES/c1") && !zk_exists($zk, "$LEASES/c99"), 'names and holders removed (c1, c99)');
ok(!zk_exists($zk, "$LEASES/kz"), "kazoo's ended lease removed");
ok(!zk_exists($zk, "$LEASES/fempty"), 'the empty name node removed');
like(zk_get($zk, "$LEASES/renewed/lease_holder") // '', qr/"holder": "me"/, "the lease renewed all along stays");
ok(zk_exists($zk, "$LEASES/c100/lease_holder"), "the lease whose lock kazoo holds stays");
is(zk_get($zk, "$LEASES/fgarbage/lease_holder"), 'not a lease', 'data that is not a lease stays');
ok(zk_exists($zk, "$LEASES/fv2/lease_holder"), 'a lease of another format stays');
ok(zk_exists($zk, "$LEASES/facl/lease_holder"), 'an ended lease with a foreign ACL stays');

is($k->cmd('unlock'), 'unlocked', "kazoo lets go of c100's lock");
ok(wait_until(sub { !zk_exists($zk, "$LEASES/c100") }, 15, 0.2), 'then c100 goes too')
  or diag zk_tree($zk, "$LEASES/c100");

#
# 3. the names can be taken again
#
is($k->cmd("lease $LEASES/c1 30 py"), 'true', "kazoo's NonBlockingLease takes 'c1' afterwards");
is(sql("SELECT zk_try_lease('c1', '30 seconds', 'sql')"), 'f', 'and SQL respects it');
is(sql("SELECT zk_try_lease('c2', '30 seconds', 'sql')"), 't', "zk_try_lease takes 'c2' afterwards");
is($k->cmd("lease $LEASES/c2 30 py"), 'false', 'and kazoo respects it');
is(sql("SELECT zk_try_lease('kz', '30 seconds', 'sql')"), 't', "zk_try_lease takes 'kz' afterwards");

# zk_lease_release: one's own lease, ended early
is(sql("SELECT zk_try_lease('rel', '1 hour', 'me')"), 't', "'rel' taken for an hour");
is(sql("SELECT zk_lease_release('rel', 'other')"), 'f', 'another holder cannot release it');
ok(zk_exists($zk, "$LEASES/rel/lease_holder"), 'and it stays');
is(sql("SELECT zk_lease_release('rel', 'me')"), 't', 'its holder releases it');
ok(!zk_exists($zk, "$LEASES/rel/lease_holder"), 'its holder node is gone at once');
is(sql("SELECT zk_lease_release('rel', 'me')"), 'f', 'released twice: false');
is($k->cmd("lease $LEASES/rel 30 py"), 'true', 'kazoo takes it at once');
is(sql("SELECT zk_try_lease('rel2', '1 hour')"), 't', "'rel2' taken by this server");
is(sql("SELECT zk_lease_release('rel2')"), 't', 'and released by this server (default holder)');
ok(wait_until(sub { !zk_exists($zk, "$LEASES/rel2") }, 15, 0.2), "the released name's node goes with the cleanup");
my ($rc, $out, $err) = $A->psql('postgres', "SELECT zk_lease_release('fgarbage', 'x')");
like($err, qr/holds data zklock cannot read/, 'releasing a holder that is not a lease: an error');
is(zk_get($zk, "$LEASES/fgarbage/lease_holder"), 'not a lease', 'and it stays');

sleep 3;
ok(zk_exists($zk, "$LEASES/c1/lease_holder") && zk_exists($zk, "$LEASES/c2/lease_holder"),
	'leases that run are not touched');
like(slurp_file($A->logfile), qr/zklock: removed \d+ ended leases and \d+ lease names from zookeeper/,
	'the worker said what it removed');
ok(wait_until(sub { zk_status_value($A, 'entries_used') eq '0' }, 10, 0.2),
	"the worker's cleanup keeps no entry afterwards");

#
# 4. more names than zklock.max_children: the cleanup still lists them all
#
sql("ALTER SYSTEM SET zklock.max_children = 10; SELECT pg_reload_conf()");
is(sql(q{DO $$ BEGIN FOR i IN 1..12 LOOP PERFORM zk_try_lease('m' || i, '1 second'); END LOOP; END $$; SELECT 'ok'}),
	'ok', '12 more leases of 1 s');
cmp_ok(scalar(zk_children($zk, $LEASES)), '>', 10, 'more names under leases than zklock.max_children');
ok(wait_until(sub { !zk_exists($zk, "$LEASES/m1") && !zk_exists($zk, "$LEASES/m12") }, 20, 0.2),
	'past zklock.max_children, the ended ones go all the same');
unlike(slurp_file($A->logfile), qr/ended leases are not removed from zookeeper/, 'no WARNING');
sql("ALTER SYSTEM RESET zklock.max_children; SELECT pg_reload_conf()");

$k->quit;
$A->stop;
zk_stop($zk);
done_testing();
