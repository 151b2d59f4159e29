
# 016_lock_batching.pl - group commit: the worker gathers many backends' lock
# creates and deletes into ZooKeeper multi-ops (src/core/batch.c).
#
# Through the fault proxy, which counts every request by operation and can
# hold replies, so that what arrives while two sends are on their way is
# gathered into one multi:
#   1. gathered creates go in one multi; each holder's fencing token is its
#      node's czxid (the multi's zxid, read from the stamp node's setData);
#   2. two creates of one lock never share a multi (tokens must grow);
#   3. a create ZooKeeper refuses (a parent whose ACL forbids creates) fails
#      its own request only: the rest of the multi is sent again and granted;
#   4. the multi lands but its answer is lost: every request finds its node
#      by its guid, no orphan, no second node;
#   5. requests per lock cycle, counted by ZooKeeper (mntr), for 16 clients
#      on distinct names: under 2 with batching, about 3 with
#      zklock.batch_max = 1;
#   5a. semaphores of 16 clients: their leases' creates and deletes (and
#      their guards' locks) gathered: fewer requests per cycle;
#   5b. 8 consumers dequeue 400 items: every item once, and their claims
#      and consumes share multis (fewer than 2 multis per item);
#   6. the stamp node deleted: made again, creates still batched;
#      the stamp node read-only: creates go one by one, tokens still right;
#   5d. zklock.batch_inflight: with 2 (the default) a second session's
#      create goes while the first's reply is held; with 1 it waits in the
#      worker; 16 clients still gather (under 2 requests per cycle).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use ZkProxy;
use Time::HiRes qw(usleep);

my $zk = zk_start();
my $proxy = proxy_start($zk);
# The sections hold the reply of a first send (or two) and check what is
# gathered behind it: they run with one send in flight before the worker
# gathers (zklock.batch_inflight = 1); section 5d compares it with the
# default, 2.
my $node = zk_node('batch', $proxy->{hosts}, session_timeout => '20s',
	conf => "max_connections = 50\nzklock.batch_inflight = 1\n");
my $sysid = $node->safe_psql('postgres',
	'SELECT system_identifier FROM pg_control_system()');
my $STAMP = "/zklock/stamps/$sysid";

# a kazoo one-liner against the real ZooKeeper: python code, with zk connected
sub kazoo_do
{
	my ($code) = @_;
	my $py = "import sys\nfrom kazoo.client import KazooClient\n"
	  . "from kazoo.security import make_acl, OPEN_ACL_UNSAFE\n"
	  . "zk = KazooClient(hosts=sys.argv[1]); zk.start(timeout=10)\n"
	  . "$code\nzk.stop()\n";
	my ($stdout, $stderr);
	my $ok = IPC::Run::run([ '/usr/bin/python3', '-c', $py, $zk->{hosts} ],
		'>', \$stdout, '2>', \$stderr);
	die "kazoo: $stderr" unless $ok;
	chomp $stdout;
	return $stdout;
}

sub requests
{
	my ($op) = @_;
	return proxy_stats($proxy)->{requests}{$op} // 0;
}

# Open $n sessions, each in a transaction
sub sessions
{
	my ($n, $tag) = @_;
	my @s;
	for my $i (1 .. $n)
	{
		my $s = new_session($node, name => "$tag$i");
		$s->query_safe('BEGIN');
		push @s, $s;
	}
	return @s;
}

# The czxid of the one contender node of lock $name, from ZooKeeper
sub node_czxid
{
	my ($name) = @_;
	my @kids = zk_children($zk, "/zklock/locks/$name");
	return "(" . scalar(@kids) . " nodes)" unless @kids == 1;
	return zk_czxid($zk, "/zklock/locks/$name/$kids[0]");
}

# Send the first locks one after the other: the first goes alone, as a
# create2 whose reply the proxy holds, and the second is held behind it in
# the worker.  Sent at once, they could go together in one multi, whose
# reply the rule does not hold: nothing would be in flight.
sub send_firsts
{
	my ($first, $tag) = @_;
	my $c0 = requests('create2');
	$first->[0]->send("SELECT zk_lock('$tag-first-0')");
	wait_until(sub { requests('create2') > $c0 }, 10, 0.01)
	  or diag "$tag: the first lock's create2 was not seen";
	$first->[1]->send("SELECT zk_lock('$tag-first-1')");
	return;
}

# Two sessions take a lock each while creates' replies are held: two sends
# in flight.  Then the sessions of @names ask at once: gathered behind them.
sub gather
{
	my ($tag, $timeout, @names) = @_;
	my @first = sessions(2, "${tag}first");
	my $rule = proxy_rule($proxy, 'delay-replies create2 1500');
	send_firsts(\@first, $tag);
	usleep(300_000);
	my @s = sessions(scalar(@names), $tag);
	$s[$_]->send("SELECT zk_lock('$names[$_]')") for 0 .. $#names;
	# they are held in the worker until a first reply comes; theirs must
	# not be delayed (replies delayed keep their time when the rule goes)
	usleep(300_000);
	proxy_cmd($proxy, "clear $rule");
	my @r;
	push @r, $_->wait($timeout) for @s;
	for (@first)
	{
		my $r = $_->wait(30);
		is($r->{sqlstate}, '00000', "$tag: a first lock granted") or diag $r->{err};
	}
	return (\@first, \@s, \@r);
}

sub finish
{
	my (@s) = @_;
	for (@s)
	{
		$_->query('COMMIT');
		$_->quit;
	}
}

# ---- 1. gathered into one multi, tokens are czxids ----
{
	my @names = map { "b1-$_" } 1 .. 8;
	my $m0 = requests('multi');
	my ($first, $s, $r) = gather('b1', 30, @names);
	for my $i (0 .. $#names)
	{
		is($r->[$i]{sqlstate}, '00000', "b1: $names[$i] granted") or diag $r->[$i]{err};
	}
	my $m = requests('multi') - $m0;
	ok($m >= 1 && $m <= 4, "b1: the 8 creates went in $m multi-op(s), not one by one");
	my %tok = map { $r->[$_]{out} => 1 } 0 .. $#names;
	ok(scalar(keys %tok) <= $m, 'b1: gathered creates share their multi\'s zxid as token ('
		  . join(',', sort keys %tok) . ')');
	my $bad = 0;
	for my $i (0 .. $#names)
	{
		my $cz = node_czxid($names[$i]);
		$bad++ unless $r->[$i]{out} eq $cz;
		diag "$names[$i]: token $r->[$i]{out}, node czxid $cz" unless $r->[$i]{out} eq $cz;
	}
	is($bad, 0, 'b1: every token is its node\'s czxid');
	ok(zk_exists($zk, $STAMP), "b1: the stamp node $STAMP exists");
	finish(@$first, @$s);
	ok(scalar(zk_wait_count($zk, "/zklock/locks/$_", 0, 10)), "b1: $_ released") for @names;
}

# ---- 2. one lock's creates never share a multi ----
{
	my @names = ('b2-same') x 4;
	my ($first, $s, $r) = gather('b2', 3, @names);
	my @held = grep { $r->[$_]{sqlstate} eq '00000' } 0 .. 3;
	my @wait = grep { $r->[$_]{sqlstate} eq 'TIMEOUT' } 0 .. 3;
	is(scalar(@held), 1, 'b2: one of four sessions holds b2-same');
	is(scalar(@wait), 3, 'b2: three wait');
	my @kids = zk_children($zk, '/zklock/locks/b2-same');
	is(scalar(@kids), 4, 'b2: four contender nodes');
	my %cz = map { zk_czxid($zk, "/zklock/locks/b2-same/$_") => 1 } @kids;
	is(scalar(keys %cz), 4, 'b2: four different czxids (no two in one multi)');
	# hand it down: tokens strictly increase
	my $cur = $held[0];
	my @tok = ($r->[$cur]{out});
	for my $k (1 .. 3)
	{
		$s->[$cur]->query_safe('COMMIT');
		my $next;
		ok(wait_until(sub {
			for my $i (@wait)
			{
				my $x = $s->[$i]->poll;
				next unless $x;
				($next, $r->[$i]) = ($i, $x);
				return 1;
			}
			return 0;
		}, 20), "b2: waiter $k got it");
		last unless defined $next;
		is($r->[$next]{sqlstate}, '00000', "b2: waiter $k granted") or diag $r->[$next]{err};
		push @tok, $r->[$next]{out};
		@wait = grep { $_ != $next } @wait;
		$cur = $next;
	}
	my $inc = 1;
	$inc &&= $tok[$_] > $tok[ $_ - 1 ] for 1 .. $#tok;
	ok($inc && @tok == 4, 'b2: fencing tokens strictly increase in grant order (' . join(' ', @tok) . ')');
	finish(@$first, @$s);
}

# ---- 3. a refused create fails alone ----
{
	kazoo_do(q{zk.ensure_path('/zklock/locks')
zk.create('/zklock/locks/b3-forbidden', b'', acl=[make_acl('world', 'anyone', read=True)])});
	my @names = ((map { "b3-$_" } 1 .. 6), 'b3-forbidden', 'b3-7');
	my $m0 = requests('multi');
	my $c0 = requests('create2');
	my ($first, $s, $r) = gather('b3', 30, @names);
	for my $i (0 .. $#names)
	{
		if ($names[$i] eq 'b3-forbidden')
		{
			is($r->[$i]{sqlstate}, '42501', 'b3: the refused create fails with 42501')
			  or diag "$r->[$i]{sqlstate} $r->[$i]{err}";
		}
		else
		{
			is($r->[$i]{sqlstate}, '00000', "b3: $names[$i] granted beside it")
			  or diag $r->[$i]{err};
		}
	}
	ok(requests('multi') > $m0, 'b3: a multi was sent');
	ok(requests('create2') - $c0 >= 7,
		'b3: the rolled-back creates were sent again on their own');
	my $bad = 0;
	for my $i (0 .. $#names)
	{
		next if $names[$i] eq 'b3-forbidden';
		$bad++ unless $r->[$i]{out} eq node_czxid($names[$i]);
	}
	is($bad, 0, 'b3: every token is its node\'s czxid');
	finish(@$first, @$s);
	ok(scalar(zk_wait_count($zk, "/zklock/locks/$_", 0, 10)), "b3: $_ left nothing")
	  for grep { $_ ne 'b3-forbidden' } @names;
	kazoo_do(q{zk.delete('/zklock/locks/b3-forbidden')});
}

# ---- 4. the multi lands, its answer is lost ----
{
	my @names = map { "b4-$_" } 1 .. 6;
	my $cut = proxy_rule($proxy, 'cut-after-request multi');
	my ($first, $s, $r) = gather('b4', 30, @names);
	ok(proxy_wait_fired($proxy, $cut, 1), 'b4: the connection was cut after a multi landed');
	for my $i (0 .. $#names)
	{
		is($r->[$i]{sqlstate}, '00000', "b4: $names[$i] granted after the lost answer")
		  or diag $r->[$i]{err};
		is(scalar(zk_children($zk, "/zklock/locks/$names[$i]")), 1,
			"b4: $names[$i] has exactly one node");
	}
	finish(@$first, @$s);
	ok(scalar(zk_wait_count($zk, "/zklock/locks/$_", 0, 10)), "b4: $_ left no orphan")
	  for @names;
}

# ---- 5. requests per lock cycle, counted by ZooKeeper ----
sub packets
{
	my ($mntr) = zk_cmd($zk, 'mntr');
	return $mntr =~ /zk_packets_received\s+(\d+)/ ? $1 : die "no mntr: $mntr";
}

# ... with -T 4, or with -t $rounds transactions per client: a barrier's
# rounds need every client to do as many (with -T, the clients that end a
# round after the deadline stop, and those that began the next one before
# it wait for them until their timeout)
sub per_cycle
{
	my ($tag, $call, $rounds) = @_;
	$call //= "zk_lock('b8-$tag-' || :client_id)";
	my $script = "$PostgreSQL::Test::Utils::tmp_check/batch_$tag.sql";
	PostgreSQL::Test::Utils::append_to_file($script,
		"BEGIN;\nSELECT $call;\nCOMMIT;\n");
	my $p0 = packets();
	my $q0 = proxy_stats($proxy)->{requests};
	my ($stdout, $stderr);
	IPC::Run::run([ 'pgbench', '-n', '-c', 16, '-j', 2, ($rounds ? ('-t', $rounds) : ('-T', 4)), '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$stdout, '2>', \$stderr)
	  or die "pgbench failed: $stderr";
	my $p1 = packets();
	my ($tx) = $stdout =~ /number of transactions actually processed: (\d+)/;
	die "pgbench: $stdout" unless $tx;
	my $pc = ($p1 - $p0 - 2) / $tx;
	my $q1 = proxy_stats($proxy)->{requests};
	note "$tag: requests by operation: "
	  . join(', ', map { "$_ " . (($q1->{$_} // 0) - ($q0->{$_} // 0)) } sort keys %$q1);
	note sprintf("%s: %d cycles, %.3f ZooKeeper requests per cycle", $tag, $tx, $pc);
	return wantarray ? ($pc, $tx) : $pc;
}

{
	my $batched = per_cycle('batched');
	ok($batched < 2.0, sprintf('b8: 16 clients, batching: %.2f requests per lock cycle (< 2)', $batched));
	$node->append_conf('postgresql.conf', "zklock.batch_max = 1\n");
	$node->reload;
	usleep(500_000);
	my $alone = per_cycle('alone');
	ok($alone > 2.8, sprintf('b8: zklock.batch_max = 1: %.2f requests per lock cycle (about 3)', $alone));
	$node->append_conf('postgresql.conf', "zklock.batch_max = 64\n");
	$node->reload;
	usleep(500_000);
}

# ---- 5d. zklock.batch_inflight: a second waited-for send goes at once ----
# A's create2 goes alone and the proxy holds its reply.  B asks meanwhile:
# with zklock.batch_inflight = 2 (the default) B's create is sent at once,
# its node is in ZooKeeper while A's reply is still held; with 1 it is held
# in the worker until A's reply comes.  Then both are granted.
sub second_send
{
	my ($tag) = @_;
	my ($a, $b) = sessions(2, $tag);
	my $c0 = requests('create2');
	my $rule = proxy_rule($proxy, 'delay-replies create2 3000');
	$a->send("SELECT zk_lock('$tag-a')");
	wait_until(sub { requests('create2') > $c0 }, 10, 0.01)
	  or diag "$tag: A's create2 was not seen";
	$b->send("SELECT zk_lock('$tag-b')");
	# counted by the proxy as it forwards them
	wait_until(sub { requests('create2') - $c0 >= 2 }, 1.5, 0.02);
	my $sent = requests('create2') - $c0;
	my $a_early = defined $a->poll;
	proxy_cmd($proxy, "clear $rule");
	my $ra = $a->wait(30);
	my $rb = $b->wait(30);
	is($ra->{sqlstate}, '00000', "$tag: A granted") or diag $ra->{err};
	is($rb->{sqlstate}, '00000', "$tag: B granted") or diag $rb->{err};
	ok(!$a_early, "$tag: A's reply was still held while B's create was looked for");
	finish($a, $b);
	return $sent;
}

{
	$node->append_conf('postgresql.conf', "zklock.batch_inflight = 2\n");
	$node->reload;
	usleep(500_000);
	is(second_send('b8in2'), 2,
		'b8in2: zklock.batch_inflight = 2: B\'s create was sent while A\'s reply was held');
	my $batched = per_cycle('batched2');
	ok($batched < 2.0,
		sprintf('b8in2: 16 clients, zklock.batch_inflight = 2: %.2f requests per lock cycle (< 2)', $batched));
	$node->append_conf('postgresql.conf', "zklock.batch_inflight = 1\n");
	$node->reload;
	usleep(500_000);
	is(second_send('b8in1'), 1,
		'b8in1: zklock.batch_inflight = 1: B\'s create waited in the worker behind A\'s');
}

# ---- 5a. semaphores: the leases' creates and deletes are gathered too ----
{
	my $batched = per_cycle('sem_batched', "zk_semaphore('b10-' || :client_id, 2)");
	$node->append_conf('postgresql.conf', "zklock.batch_max = 1\n");
	$node->reload;
	usleep(500_000);
	my $alone = per_cycle('sem_alone', "zk_semaphore('b10-' || :client_id, 2)");
	$node->append_conf('postgresql.conf', "zklock.batch_max = 64\n");
	$node->reload;
	usleep(500_000);
	ok($batched < 0.85 * $alone,
		sprintf('b10: 16 clients on their own semaphores: %.2f requests per cycle, %.2f with zklock.batch_max = 1',
			$batched, $alone));
	# the last leases' deletes go at COMMIT, unwaited: give them time
	my $left;
	wait_until(sub {
		$left = zk_count($zk, '/zklock/semaphores') - scalar(zk_children($zk, '/zklock/semaphores'));
		$left == 0 }, 30, 0.2);
	is($left, 0, 'b10: no lease left (only the pools)');
	# the pools' parents are sent once per session: gone, they are made again
	zkq($zk, 'delete', '/zklock/semaphores');
	ok(!zk_exists($zk, '/zklock/semaphores'), 'b10: /zklock/semaphores deleted');
	my ($rc, $out, $err) = $node->psql('postgres',
		"BEGIN; SELECT zk_semaphore('b10-again', 1, '10s'); SELECT 'ok'; COMMIT;", timeout => 30);
	is($rc, 0, 'b10: a semaphore is taken again, its parents made again') or diag $err;
}

# ---- 5b. barrier members: their creates (one barrier's too) are gathered ----
{
	# two lock creates' replies held: sends in flight; then 8 members enter
	my @first = sessions(2, 'b11first');
	# (held 5 s: the 8 sessions' requests must all reach the worker while the
	# first replies are held, however slow the machine; a reply held keeps
	# its time after the rule is cleared, so the wait below stays inside it)
	my @s = sessions(8, 'b11');
	my $rule = proxy_rule($proxy, 'delay-replies create2 5000');
	send_firsts(\@first, 'b11');
	usleep(300_000);
	my $m0 = requests('multi');
	$_->send("SELECT zk_barrier_enter('b11', 8, '30s')") for @s;
	wait_until(sub {
		$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity "
			  . "WHERE query LIKE '%zk_barrier_enter(''b11''%' AND wait_event_type = 'Extension'") == 8 }, 4, 0.05)
	  or diag 'b11: not all 8 members were waiting on the worker within 4 s';
	usleep(200_000);
	proxy_cmd($proxy, "clear $rule");
	for (@s)
	{
		my $r = $_->wait(40);
		like($r->{out} // '', qr/^t$/m, 'b11: a member entered the barrier of 8') or diag $r->{err};
	}
	$_->wait(30) for @first;
	my @kids = grep { $_ ne 'ready' } zk_children($zk, '/zklock/barriers/b11');
	is(scalar(@kids), 8, 'b11: 8 member nodes');
	my %cz = map { (zk_czxid($zk, "/zklock/barriers/b11/$_") => 1) } @kids;
	is(scalar(keys %cz), 1, 'b11: the 8 members were created by one multi (one czxid)');
	ok(requests('multi') > $m0, 'b11: a multi was sent');
	$_->send("SELECT zk_barrier_leave('b11', '30s')") for @s;
	for (@s)
	{
		my $r = $_->wait(40);
		like($r->{out} // '', qr/^t$/m, 'b11: a member left') or diag $r->{err};
	}
	is(scalar(grep { $_ ne 'ready' } zk_children($zk, '/zklock/barriers/b11')), 0,
		'b11: no member node left');
	finish(@first, @s);

	# 16 sessions, round after round on one barrier of 16: its node is not
	# made again by every member (it was, before the first ZNONODE)
	my $c0 = requests('createContainer');
	my $d0 = requests('delete') + requests('multi');
	my ($pc, $members) = per_cycle('bar',
		"zk_barrier_enter('b11r', 16, '20s');\nSELECT zk_barrier_leave('b11r', '20s')", 60);
	my $made = requests('createContainer') - $c0;
	my $dels = requests('delete') + requests('multi') - $d0;
	ok($members >= 32 && $made < 0.2 * $members,
		sprintf('b11: %d members in rounds of 16: the barrier node made %d times, %.2f requests per member and round',
			$members, $made, $pc));
	# a member's own delete, and the leaving members' delete of ready once
	# per server and round, not once per member
	ok($dels < 1.5 * $members,
		sprintf('b11: %.2f deletes and multis per member and round (a member and ready: 2 if every member deleted ready)',
			$dels / $members));
	is(scalar(grep { $_ ne 'ready' } zk_children($zk, '/zklock/barriers/b11r')), 0,
		'b11: no member node left after the rounds');
}

# ---- 5b'. a member whose multi failed still hears the opening ----
# A member's create goes in a multi with a create ZooKeeper refuses: the
# multi fails and the member's create goes again alone, behind the watch on
# ready that was sent behind the multi, so the watch's answer comes first,
# before the member waits.  The watch must stay until the create is
# answered: here a kazoo member counts ours while our create's answer is
# held, opens the barrier and starts leaving (deleting ready, then its
# node, which sorts after ours).  Had the watch been taken off, our member
# would find neither ready nor enough members, and both would wait.
{
	kazoo_do(q{zk.ensure_path('/zklock/locks')
zk.ensure_path('/zklock/barriers')
zk.create('/zklock/locks/b12-forbidden', b'', acl=[make_acl('world', 'anyone', read=True)])});
	my $BAR = '/zklock/barriers/b12';
	# enters as soon as it sees our member node, leaves at once
	my $kpy = <<'PY';
import sys, time, uuid
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1]); zk.start(timeout=10)
b = zk.DoubleBarrier(sys.argv[2], 2)
b.node_name = 'zzzz' + uuid.uuid4().hex
b.create_path = b.path + '/' + b.node_name
print('ready', flush=True)
sys.stdin.readline()
deadline = time.time() + 30
while time.time() < deadline:
    kids = zk.get_children(sys.argv[2]) if zk.exists(sys.argv[2]) else []
    if [k for k in kids if k != 'ready' and not k.startswith('zzzz')]:
        break
    time.sleep(0.005)
b.enter()
print('entered', flush=True)
b.leave()
print('left', flush=True)
zk.stop()
PY
	my $k = kazoo_process($zk, $ZkLockTest::PYTHON, '-c', $kpy, $zk->{hosts}, $BAR);
	is($k->read_line(30) // $k->{stderr}, 'ready', 'b12: the kazoo member is connected');

	# the answers held here for 5 s twice in a row: requests wait longer
	my @first = sessions(2, 'b12first');
	my ($x, $m) = (sessions(1, 'b12x'), sessions(1, 'b12m'));
	$_->query_safe("SET zklock.connect_timeout = '60s'") for @first, $x, $m;
	$first[$_]->query_safe("SELECT zk_lock('b12-first-$_')") for 0 .. 1;
	$_->query_safe('COMMIT; BEGIN') for @first;
	my $rule = proxy_rule($proxy, 'delay-replies create2 5000');
	send_firsts(\@first, 'b12');
	usleep(300_000);
	my $m0 = requests('multi');
	my $a0 = requests('create2');
	$k->{stdin} .= "go\n";
	$x->send("SELECT zk_lock('b12-forbidden')");
	$m->send("SELECT zk_barrier_enter('b12', 2, '30s')");
	is($k->read_line(20) // $k->{stderr}, 'entered',
		'b12: the kazoo member counted ours and entered');
	ok($m->running, 'b12: meanwhile our member still waits for its create\'s answer');
	ok(wait_until(sub { !zk_exists($zk, "$BAR/ready") }, 20, 0.05),
		'b12: the kazoo member started to leave: ready is gone');
	proxy_cmd($proxy, "clear $rule");
	my $r = $m->wait(40);
	like($r->{out} // '', qr/^t$/m, 'b12: our member entered: the opening was not missed')
	  or diag $r->{err};
	my $rx = $x->wait(30);
	is($rx->{sqlstate}, '42501', 'b12: the refused create failed alone') or diag $rx->{err};
	ok(requests('multi') > $m0 && requests('create2') - $a0 >= 2,
		'b12: the creates went in a multi, then again on their own');
	$r = $m->query("SELECT zk_barrier_leave('b12', '30s')", 40);
	like($r->{out} // '', qr/^t$/m, 'b12: our member left') or diag $r->{err};
	is($k->read_line(30) // $k->{stderr}, 'left', 'b12: the kazoo member left');
	$k->{h}->kill_kill;
	$_->wait(30) for @first;
	finish(@first, $x, $m);
	is(scalar(zk_children($zk, $BAR)), 0, 'b12: nothing left in the barrier');
	kazoo_do(q{zk.delete('/zklock/locks/b12-forbidden')});
}

# ---- 5b''. a member still leaving does not wait for the next round ----
# Barrier of 2: our member and a kazoo member whose node sorts first (the
# lowest: it leaves last).  Our member deletes its node and watches the
# kazoo one; the notice of its deletion is held by the proxy, and
# meanwhile the kazoo member finishes leaving and enters the next round
# with a new node.  When our member looks again it must see that its own
# round is over, not wait for the newcomer (which waits for it).
{
	my $BAR = '/zklock/barriers/b13';
	my $kpy = <<'PY';
import sys, uuid
from kazoo.client import KazooClient
zk = KazooClient(hosts=sys.argv[1]); zk.start(timeout=10)
def member():
    b = zk.DoubleBarrier(sys.argv[2], 2)
    b.node_name = '00000000' + uuid.uuid4().hex
    b.create_path = b.path + '/' + b.node_name
    return b
b = member()
print('ready', flush=True)
sys.stdin.readline()
b.enter()
print('entered', flush=True)
sys.stdin.readline()
b.leave()
print('left', flush=True)
b2 = member()
b2.enter()
print('entered again', flush=True)
b2.leave()
print('left again', flush=True)
zk.stop()
PY
	my $k = kazoo_process($zk, $ZkLockTest::PYTHON, '-c', $kpy, $zk->{hosts}, $BAR);
	is($k->read_line(30) // $k->{stderr}, 'ready', 'b13: the kazoo member is connected');
	my $m = new_session($node, name => 'b13m');
	$m->send("SELECT zk_barrier_enter('b13', 2, '30s')");
	$k->{stdin} .= "go\n";
	is($k->read_line(30) // $k->{stderr}, 'entered', 'b13: the kazoo member entered');
	like($m->wait(30)->{out} // '', qr/^t$/m, 'b13: our member entered');
	my $rule = proxy_rule($proxy, 'delay-replies notification 3000');
	$m->send("SELECT zk_barrier_leave('b13', '20s')");
	$k->{stdin} .= "go\n";
	is($k->read_line(30) // $k->{stderr}, 'left', 'b13: the kazoo member left (last)');
	ok(wait_until(sub { grep { /^00000000/ } zk_children($zk, $BAR) }, 20, 0.05),
		'b13: and came back for the next round with a new node');
	my $r = $m->wait(40);
	proxy_cmd($proxy, "clear $rule");
	like($r->{out} // '', qr/^t$/m, 'b13: our member left its round: it did not wait for the next one')
	  or diag explain $r;
	# the next round, both again
	$r = $m->query("SELECT zk_barrier_enter('b13', 2, '30s')", 40);
	like($r->{out} // '', qr/^t$/m, 'b13: our member entered the next round');
	is($k->read_line(30) // $k->{stderr}, 'entered again', 'b13: with the kazoo member');
	$r = $m->query("SELECT zk_barrier_leave('b13', '30s')", 40);
	like($r->{out} // '', qr/^t$/m, 'b13: and both left it');
	is($k->read_line(30) // $k->{stderr}, 'left again', 'b13: the kazoo member too');
	$k->{h}->kill_kill;
	$m->quit;
	is(scalar(zk_children($zk, $BAR)), 0, 'b13: nothing left in the barrier');
}

# ---- 5c. claims and consumes of 8 consumers, gathered; every item once ----
sub per_item
{
	my ($tag) = @_;
	my $n = 400;
	$node->safe_psql('postgres', "CREATE TABLE got_$tag (body text)");
	$node->safe_psql('postgres',
		"SELECT count(zk_enqueue('bq-$tag', 'i' || g)) FROM generate_series(1, $n) g");
	my $script = "$PostgreSQL::Test::Utils::tmp_check/batch_q_$tag.sql";
	PostgreSQL::Test::Utils::append_to_file($script,
		"BEGIN;\nINSERT INTO got_$tag SELECT body FROM zk_dequeue('bq-$tag', '10s');\nCOMMIT;\n");
	my $q0 = proxy_stats($proxy)->{requests};
	my ($stdout, $stderr);
	IPC::Run::run([ 'pgbench', '-n', '-c', 8, '-j', 2, '-t', $n / 8, '-f', $script,
			'-h', $node->host, '-p', $node->port, 'postgres' ],
		'>', \$stdout, '2>', \$stderr)
	  or die "pgbench failed: $stderr";
	my $q1 = proxy_stats($proxy)->{requests};
	my %d = map { $_ => (($q1->{$_} // 0) - ($q0->{$_} // 0)) } keys %$q1;
	note "$tag: requests by operation: " . join(', ', map { "$_ $d{$_}" } sort keys %d);
	is($node->safe_psql('postgres', "SELECT count(*), count(DISTINCT body) FROM got_$tag"),
		"$n|$n", "b9: $tag: $n items, each dequeued once");
	is(zk_count($zk, "/zklock/queues/bq-$tag/entries"), 0, "b9: $tag: none left");
	my $multi = ($d{multi} // 0) / $n;
	note sprintf('%s: %.3f multis per item (claims and consumes)', $tag, $multi);
	return $multi;
}

{
	my $batched = per_item('batched');
	$node->append_conf('postgresql.conf', "zklock.batch_max = 1\n");
	$node->reload;
	usleep(500_000);
	my $alone = per_item('alone');
	$node->append_conf('postgresql.conf', "zklock.batch_max = 64\n");
	$node->reload;
	usleep(500_000);
	ok($alone >= 1.9, sprintf('b9: zklock.batch_max = 1: %.2f multis per item (a claim and a consume each)', $alone));
	ok($batched < 0.75 * $alone,
		sprintf('b9: 8 consumers, batching: %.2f multis per item', $batched));
}

# ---- 6. the stamp node deleted, then read-only ----
{
	kazoo_do("zk.delete('$STAMP')");
	ok(!zk_exists($zk, $STAMP), 'b5: stamp deleted');
	my @names = map { "b5-$_" } 1 .. 6;
	my ($first, $s, $r) = gather('b5', 30, @names);
	is(scalar(grep { $_->{sqlstate} eq '00000' } @$r), 6, 'b5: all granted without the stamp');
	my $bad = grep { $r->[$_]{out} ne node_czxid($names[$_]) } 0 .. $#names;
	is($bad, 0, 'b5: tokens are czxids');
	finish(@$first, @$s);
	ok(wait_until(sub { zk_exists($zk, $STAMP) }, 10), 'b5: the stamp node was made again');

	# read-only for everyone: creates go one by one
	kazoo_do("zk.set_acls('$STAMP', [make_acl('world', 'anyone', read=True, admin=True)])");
	my $log0 = -s $node->logfile;
	# a failing multi first tells the worker
	my ($f2, $s2, $r2) = gather('b6', 30, map { "b6-$_" } 1 .. 6);
	my $m0 = requests('multi');
	my ($f3, $s3, $r3) = gather('b7', 30, map { "b7-$_" } 1 .. 6);
	is(scalar(grep { $_->{sqlstate} eq '00000' } (@$r2, @$r3)), 12,
		'b6/b7: all granted with a read-only stamp');
	my $bad2 = grep { $r3->[$_]{out} ne node_czxid("b7-" . ($_ + 1)) } 0 .. 5;
	is($bad2, 0, 'b7: tokens are czxids (creates went alone)');
	is(requests('multi') - $m0, 0, 'b7: no multi carried creates');
	like(slurp_file($node->logfile, $log0), qr/could not write the node \Q$STAMP\E/,
		'b6: the refused stamp is logged');
	finish(@$f2, @$s2, @$f3, @$s3);
	kazoo_do("zk.set_acls('$STAMP', OPEN_ACL_UNSAFE)");
	# a new session asks for the stamp again
}

# the last locks' deletes go at COMMIT, unwaited: give them time
my $contenders;
wait_until(sub {
	$contenders = zk_count($zk, '/zklock/locks') - scalar(zk_children($zk, '/zklock/locks'));
	$contenders == 0 }, 30, 0.2);
is($contenders, 0, 'no contender node left under any lock');

done_testing();
