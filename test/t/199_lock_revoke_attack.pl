
# 199_lock_revoke_attack.pl - zk_lock_revoke under faults and races (issue
# 39): defects a hostile review of the first version found.
#
# 1. The request's create lands but its reply is lost (the revoker's cluster
#    reaches ZooKeeper through test/zkproxy.py, which cuts the connection
#    after forwarding the create and refuses reconnects for a while); the
#    revoker's timeout runs out before the worker could retry.  Before: the
#    entry, let go of while its create was in doubt, was settled without a
#    delete, so the ephemeral request stayed under <root>/revokes for as
#    long as the worker's session lived (and went on revoking whatever it
#    named).  Now: a create in doubt counts as made, and is deleted once the
#    session is usable again; no entry is left.  (The revoker gives up
#    through zklock.connect_timeout, 08006; a cancel takes the same path.)
# 2. Two revokers of one holder: the second one's create finds the first's
#    request (ZNODEEXISTS) and only watched the holder's node.  Before: when
#    the first one's (short) timeout ran out and it deleted its request,
#    nobody asked any more; the holder kept its lock, and the second revoke
#    reported "still held" after its whole timeout.  Now: it watches the
#    other's request and makes its own once that is gone; the holder is
#    revoked.
# 3. More holders than one batch (ZK_REVOKE_BATCH, 32): one holder that
#    cannot be taken (its worker stopped) in the first batch.  Before: the
#    first batch waited the whole timeout for it and the later batch was
#    asked with no time left, its holder reported "still held" (and kept its
#    lock).  Now: with more than one batch each waits at most a slice a pass,
#    and the passes go on until the timeout: every other holder is revoked.
# 4. A create in doubt meets another revoker's request: revoker B's request
#    for a holder is there (B on the revokers' cluster itself, so one
#    session, only the data tells them apart; then B on a cluster of its
#    own), revoker A's create of the same path reaches ZooKeeper but its
#    reply (ZNODEEXISTS) is lost (cut-after-request create), so the retry
#    meets the node while A's create is in doubt.  Before: A took B's
#    request for its own and deleted it when its (short) timeout ran out;
#    B, watching only the holder, was cut short: nobody asked any more and
#    B reported "still held" after its whole timeout.  Now: the request's
#    data carries its revoker's guid; A reads the node back, finds it is not
#    its own, watches it instead, and never deletes it; B's request
#    survives (same czxid) and B's holder is revoked.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use ZkProxy;
use Time::HiRes qw(time usleep);

my $zk = zk_start();
my $p = proxy_start($zk);
# the revokers' cluster, through the proxy; its session outlives the
# refused reconnects
my $n1 = zk_node('rva1', $p->{hosts},
	session_timeout => '20s',
	connect_timeout => '30s');
# the holders' cluster, straight to ZooKeeper; its session outlives a short
# SIGSTOP of its worker
my $n2 = zk_node('rva2', $zk, session_timeout => '20s');
my $LOCKS = '/zklock/locks';
my $REVOKES = '/zklock/revokes';

sub nodes_of { my @n = zk_lock_nodes($zk, "$LOCKS/$_[0]"); return scalar @n; }
sub requests { my @r = zk_children($zk, $REVOKES); return scalar @r; }

# <root>/revokes exists before the scenarios (a first revoke makes it)
{
	my $h = new_session($n2, name => 'h0');
	$h->query_safe("BEGIN; SELECT zk_lock('a0')");
	is($n1->safe_psql('postgres', "SELECT outcome FROM zk_lock_revoke('a0')"), 'revoked',
		'a first revoke through the proxy');
	$h->query('ROLLBACK');
	$h->quit;
	is(requests(), 0, 'no request left');
}

# 1. the create's reply lost, the revoker gone before the retry
{
	my $h = new_session($n2, name => 'h1');
	$h->query_safe("BEGIN; SELECT zk_lock('a1')");
	my $cut = proxy_rule($p, 'cut-after-request create');
	proxy_cmd($p, 'refuse 6');
	my $rv = new_session($n1, name => 'rv1');
	# the revoke's timeout bounds only its wait for the holder: a request
	# without an answer is bounded by zklock.connect_timeout (08006)
	$rv->query_safe("SET zklock.connect_timeout = '2s'");
	my $r = $rv->query("SELECT outcome FROM zk_lock_revoke('a1', '2s')");
	ok(proxy_wait_fired($p, $cut, 10), "the request's create landed, its reply was lost");
	like($r->{sqlstate}, qr/^(00000|08006)$/,
		"the revoke gives up while its request is in doubt ($r->{sqlstate}: " . ($r->{out} // $r->{err}) . ')');
	proxy_cmd($p, 'reset');
	is(wait_for_state($n1, 'connected', 30)->{state}, 'connected', 'the revoker reconnects (same session)');
	ok(wait_until(sub { requests() == 0 }, 20),
		'the request in doubt is deleted once the session is usable again')
	  or diag 'left: ' . join(' ', zk_children($zk, $REVOKES));
	ok(wait_until(sub { zk_status_value($n1, 'entries_used') eq '0' }, 20),
		"no entry is left on the revoker's cluster");
	$h->query('ROLLBACK');
	$h->quit;
	$rv->quit;
	ok(wait_until(sub { nodes_of('a1') == 0 }, 20), 'no contender node is left');
}

# 2. two revokers of one holder; the first one's timeout runs out first
{
	my $h = new_session($n2, name => 'h2');
	$h->query_safe('BEGIN');
	my $th = $h->query_safe("SELECT zk_lock('a2')");
	my $a = new_session($n1, name => 'rva');
	my $b = new_session($n1, name => 'rvb');
	my $wpid = worker_pid($n2);
	kill 'STOP', $wpid;
	$a->send("SELECT outcome FROM zk_lock_revoke('a2', '2s')");
	my ($hn) = zk_lock_nodes($zk, "$LOCKS/a2");
	my $req = $hn->{name};
	ok(wait_until(sub { zk_exists($zk, "$REVOKES/$req") }, 10), "the first revoker's request is made");
	my $cz0 = zk_czxid($zk, "$REVOKES/$req");
	my $t0 = time;
	$b->send("SELECT outcome FROM zk_lock_revoke('a2', '30s')");
	usleep(500_000);
	my $r = $a->wait(30);
	is($r->{out}, 'still held', 'the first revoker: still held (the holder\'s worker is stopped)');
	# the first one's request deleted before the holder's worker runs again
	ok(wait_until(sub { my $cz = zk_czxid($zk, "$REVOKES/$req"); !defined $cz || $cz != $cz0 }, 20),
		"the first revoker's request is deleted");
	kill 'CONT', $wpid;
	$r = $b->wait(40);
	is($r->{out}, 'revoked', 'the second revoker: revoked, its own request made when the first one\'s went');
	cmp_ok(time - $t0, '<', 28, 'well before its timeout');
	$r = $h->query('COMMIT');
	is($r->{sqlstate}, '40001', "the holder's COMMIT fails with 40001");
	ok(wait_until(sub { requests() == 0 }, 20), 'no request is left');
	ok(wait_until(sub { zk_status_value($n1, 'entries_used') eq '0' }, 20),
		"no entry is left on the revokers' cluster");
	$h->quit;
	$a->quit;
	$b->quit;
}

# 3. 33 shared holders, the first one's worker stopped
{
	my $n3 = zk_node('rva3', $zk);
	my $stuck = new_session($n2, name => 'h3s');
	$stuck->query_safe("BEGIN; SELECT zk_lock_shared('a3')");
	my @h;
	for my $i (1 .. 32)
	{
		my $s = new_session($n3, name => "h3_$i");
		$s->query_safe("BEGIN; SELECT zk_lock_shared('a3')");
		push @h, $s;
	}
	is(nodes_of('a3'), 33, '33 readers hold a3');
	my $wpid = worker_pid($n2);
	kill 'STOP', $wpid;
	my $t0 = time;
	my $out = $n1->safe_psql('postgres',
		"SELECT outcome, count(*) FROM zk_lock_revoke('a3', '4s') GROUP BY outcome ORDER BY outcome");
	my $took = time - $t0;
	kill 'CONT', $wpid;
	is($out, "revoked|32\nstill held|1", 'every holder but the stopped one is revoked');
	cmp_ok($took, '<', 30, 'within about the timeout');
	my $lost = 0;
	for my $s (@h)
	{
		$lost++ if $s->query('COMMIT')->{sqlstate} eq '40001';
		$s->quit;
	}
	is($lost, 32, "the 32 revoked readers' COMMITs fail with 40001");
	is($stuck->query('COMMIT')->{sqlstate}, '00000', 'the stopped one commits, its request gone');
	$stuck->quit;
	ok(wait_until(sub { requests() == 0 }, 20), 'no request is left');
	ok(wait_until(sub { zk_status_value($n1, 'entries_used') eq '0' }, 20),
		"no entry is left on the revoker's cluster");
}

# 4. a create in doubt meets another revoker's request
{
	my $n4 = zk_node('rva4', $zk);
	my $k = 0;
	for my $case ([ 'the same cluster (one session)', $n1 ], [ 'another cluster', $n4 ])
	{
		my ($where, $other) = @$case;
		my $lock = 'a4_' . ++$k;
		my $h = new_session($n2, name => "h4_$k");
		$h->query_safe("BEGIN; SELECT zk_lock('$lock')");
		my ($hn) = zk_lock_nodes($zk, "$LOCKS/$lock");
		my $req = "$REVOKES/$hn->{name}";
		my $a = new_session($n1, name => "rv4a_$k");
		my $b = new_session($other, name => "rv4b_$k");
		my $wpid = worker_pid($n2);
		kill 'STOP', $wpid;
		$b->send("SELECT outcome FROM zk_lock_revoke('$lock', '25s')");
		ok(wait_until(sub { zk_exists($zk, $req) }, 10), "B ($where): its request is made");
		# the entries of the revokers' cluster but A's (B's, when it is there)
		my $base = zk_status_value($n1, 'entries_used');
		my $cz0 = zk_czxid($zk, $req);
		like(zk_get($zk, $req) // '', qr/^\{"request":"[0-9a-f]{32}","cluster":"\d+"/,
			"B ($where): the request's data names its revoker (a guid, then who asks)");
		my $c0 = proxy_stats($p)->{requests}{create} // 0;
		my $cut = proxy_rule($p, 'cut-after-request create');
		my $r = $a->query("SELECT outcome FROM zk_lock_revoke('$lock', '3s')", 30);
		ok(proxy_wait_fired($p, $cut, 10), "A ($where): its create reached ZooKeeper, the reply was lost");
		proxy_cmd($p, 'reset');
		cmp_ok(proxy_stats($p)->{requests}{create} // 0, '>=', $c0 + 2,
			"A ($where): its create was sent again, in doubt, and met B's request");
		is("$r->{sqlstate} " . ($r->{out} // ''), '00000 still held',
			"A ($where): still held (the holder's worker is stopped)")
		  or diag $r->{err};
		# A's entry settled: what it was going to delete is deleted by now
		ok(wait_until(sub { zk_status_value($n1, 'entries_used') eq $base }, 20),
			"A ($where): its entry is let go of")
		  or diag 'entries_used ' . zk_status_value($n1, 'entries_used') . ", expected $base";
		is(zk_czxid($zk, $req), $cz0, "A ($where): B's request is not deleted (same czxid)");
		kill 'CONT', $wpid;
		$r = $b->wait(40);
		is($r->{out}, 'revoked', "B ($where): revoked, its request served to the end");
		is($h->query('COMMIT')->{sqlstate}, '40001', "the holder's COMMIT fails with 40001");
		ok(wait_until(sub { requests() == 0 }, 20), 'no request is left')
		  or diag 'left: ' . join(' ', zk_children($zk, $REVOKES));
		$h->quit;
		$a->quit;
		$b->quit;
	}
	ok(wait_until(sub { zk_status_value($n1, 'entries_used') eq '0' && zk_status_value($n4, 'entries_used') eq '0' }, 20),
		"no entry is left on the revokers' clusters");
}

done_testing();
