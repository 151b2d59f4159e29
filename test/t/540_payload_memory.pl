
# 540_payload_memory.pl - payload memory in the dsa has a limit, and a
# dequeue's answer has a byte cap (issue 23).
#
# The dsa's footprint is read through the file system: the node uses
# dynamic_shared_memory_type = mmap, so every dynamic shared memory segment
# (the dsa's, large answers') is a file in $PGDATA/pg_dynshmem.  dsa
# segments are not given back when large allocations are freed, so that
# size is the high-water mark of what the dsa held.
#
# A. A transaction that dequeues 20 items of 900 kB, one call each, keeps
#    the dsa small: each call's payloads leave it once the rows are copied
#    out, not at COMMIT (before: all 18 MB stayed until COMMIT).
# B. zk_dequeue(q, '0', 1000) with zklock.max_answer_bytes = 4MB on 20
#    items of 900 kB returns a handful (at most 4 MB of payloads; before:
#    all 20, 18 MB in one answer); repeated calls drain the queue with
#    every item exactly once, and ZooKeeper has no entry and no claim
#    left.
# C. With zklock.max_payload_memory = 6MB:
#    1. one dequeue (cap 16 MB) returns fewer items than its cap allows:
#       the item whose payload found no room is given back at once (the
#       queue's length counts it, ZooKeeper has no claim of it);
#    2. COMMITs of enqueues while the worker is stopped fill the dsa with
#       their items: the ones that find no room fail with 53200 ("out of
#       zklock payload memory", with the setting in the detail and a hint)
#       and publish nothing; the others publish once the worker goes on;
#    3. consumers and producers of 900 kB items at once: every call
#       succeeds or fails with 53200, no item is lost or taken twice,
#       nothing is left in ZooKeeper, a session lock held elsewhere is
#       still held, and the worker keeps its ZooKeeper session;
#    4. a reload raising the setting is applied by the worker: the same
#       dequeue then returns more items.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

# ZooKeeper keeps its last 500 transactions in memory for followers, each
# of an item's transactions is 900 kB here: more heap than the default
$ENV{ZK_HEAP} = '1g';
my $zk = zk_start();
my $node = zk_node('payload', $zk,
	session_timeout => '10s',
	conf => "dynamic_shared_memory_type = mmap\nzklock.max_item_size = '976kB'\nzklock.max_transaction_size = '976kB'\n");

my $ITEM = 900000;

# kB of dynamic shared memory segments of the node
sub dsm_kb
{
	my $dir = $node->data_dir . '/pg_dynshmem';
	my $total = 0;
	opendir(my $dh, $dir) or return -1;
	foreach my $f (readdir $dh)
	{
		next unless $f =~ /^mmap\./;
		my @st = stat("$dir/$f");
		$total += $st[7] if @st;
	}
	closedir $dh;
	return int($total / 1024);
}

sub qpath
{
	my ($name) = @_;
	return $node->safe_psql('postgres', "SELECT zk_path('queue', '$name')");
}

# n items of 900 kB into a queue, one transaction each (letters from $from)
sub fill
{
	my ($s, $name, $n, $from) = @_;
	$from //= 0;
	foreach my $i (1 .. $n)
	{
		my $c = 65 + ($from + $i) % 26;
		$s->query_safe("SELECT zk_enqueue('$name', repeat(chr($c), $ITEM))");
	}
	return;
}

my $F = new_session($node, name => 'fill');

#
# A. Payloads leave the dsa once copied out
#
{
	fill($F, 'many', 20);
	my $s = new_session($node, name => 'many');
	# the dsa exists once something used it: measure from there
	$s->query_safe("SELECT count(*) FROM zk_queue_peek('many', 1)");
	my $base = dsm_kb();
	$s->query_safe('BEGIN');
	my $got = 0;
	foreach my $i (1 .. 20)
	{
		$got++ if $s->query_safe("SELECT length(payload) FROM zk_dequeue('many', '0', 1)") eq "$ITEM";
	}
	is($got, 20, 'A: one transaction dequeued 20 items of 900 kB, one call each');
	my $during = dsm_kb();
	note "A: dynamic shared memory $base kB before the transaction, $during kB with 20 items held";
	ok($during - $base < 4096,
		'A: the dsa stays small while the transaction holds the claims (payloads freed once copied out)')
	  or diag "A: $base kB -> $during kB";
	is(zk_count($zk, qpath('many') . '/taken'), 20, 'A: the 20 claims are held in ZooKeeper');
	$s->query_safe('COMMIT');
	is(zk_count($zk, qpath('many') . '/taken'), 0, 'A: COMMIT consumed them: no claim left');
	is(zk_count($zk, qpath('many') . '/entries'), 0, 'A: and no item');
	$s->quit;
}

#
# B. A dequeue's byte cap
#
{
	fill($F, 'big', 20);
	my $s = new_session($node, name => 'cap');
	$s->query_safe("SET zklock.max_answer_bytes = '4MB'");
	my %seen;
	my $dup = 0;
	my $calls = 0;
	my $max_n = 0;
	my $max_bytes = 0;
	my $bad = 0;
	my $first;
	while ($calls < 60)
	{
		$calls++;
		$s->query_safe('BEGIN');
		my $out = $s->query_safe(
			"SELECT count(*) || ' ' || coalesce(sum(length(payload)), 0) || ' ' || "
			  . "coalesce(string_agg(msg_id::text, ','), '') FROM zk_dequeue('big', '0', 1000)");
		my ($n, $bytes, $ids) = split / /, $out;
		if ($calls == 1)
		{
			$first = $n;
			is(zk_count($zk, qpath('big') . '/taken'), $n,
				"B: the first call's $n claims are in ZooKeeper while its transaction is open");
		}
		$s->query_safe('COMMIT');
		last if $n == 0;
		$max_n = $n if $n > $max_n;
		$max_bytes = $bytes if $bytes > $max_bytes;
		$bad++ if $bytes != $n * $ITEM;
		foreach my $id (split /,/, $ids // '')
		{
			$dup++ if $seen{$id}++;
		}
	}
	note "B: $calls calls; the first returned $first items, the largest answer $max_n items ($max_bytes bytes)";
	ok($first >= 1 && $first <= 5, "B: a dequeue of up to 1000 items returns a handful ($first)");
	ok($max_bytes <= 4 * 1024 * 1024, "B: no answer carries more than zklock.max_answer_bytes ($max_bytes)");
	is($bad, 0, 'B: every item came whole');
	is(scalar(keys %seen), 20, 'B: repeated calls drained the queue: 20 items');
	is($dup, 0, 'B: none twice');
	is(zk_count($zk, qpath('big') . '/entries'), 0, 'B: no item left in ZooKeeper');
	is(zk_count($zk, qpath('big') . '/taken'), 0, 'B: no claim left in ZooKeeper');
	$s->quit;
}

#
# C. zklock.max_payload_memory
#
$F->quit;
$node->append_conf('postgresql.conf', "zklock.max_payload_memory = '6MB'\n");
$node->restart;
is(wait_for_state($node, 'connected', 60)->{state}, 'connected', 'C: the worker is connected after the restart');
# (psql, not safe_psql: a zklock without the setting fails here and goes on)
sub show_limit
{
	my ($rc, $out) = $node->psql('postgres', 'SHOW zklock.max_payload_memory', on_error_die => 0);
	return $out // '';
}
is(show_limit(), '6MB', 'C: the limit is set');
my $sid = zk_status_value($node, 'session_id');
my $wpid = worker_pid($node);
$F = new_session($node, name => 'fill2');

# a session lock held elsewhere all along
my $L = new_session($node, name => 'locker');
ok($L->query_safe("SELECT zk_session_lock('kept')") > 0, 'C: another session holds a session lock');

# 1. one dequeue meets the limit
my $lim_n;
{
	fill($F, 'lim', 20);
	my $s = new_session($node, name => 'lim');
	$s->query_safe("SET zklock.max_answer_bytes = '16MB'");
	$s->query_safe('BEGIN');
	my $r = $s->query("SELECT count(*) FROM zk_dequeue('lim', '0', 1000)", 60);
	$lim_n = $r->{out};
	is($r->{sqlstate}, '00000', 'C1: the dequeue that meets the limit succeeds') or diag $r->{err};
	note "C1: dynamic shared memory now " . dsm_kb() . ' kB';
	ok($lim_n =~ /^\d+$/ && $lim_n >= 1 && $lim_n <= 7,
		"C1: it returns fewer items than its 16 MB cap allows: what 6 MB hold ($lim_n)");
	is(zk_count($zk, qpath('lim') . '/taken'), $lim_n,
		'C1: only the items returned are claimed: the one that found no room was given back');
	is($s->query_safe("SELECT zk_queue_length('lim')"), 20 - $lim_n, 'C1: the others are free');
	$s->query_safe('COMMIT');
	is(zk_count($zk, qpath('lim') . '/entries'), 20 - $lim_n, 'C1: COMMIT consumed exactly those');
	is(zk_count($zk, qpath('lim') . '/taken'), 0, 'C1: no claim left');
	$s->quit;
}

# 2. enqueues' COMMITs while the worker is stopped
{
	my @p = map { new_session($node, name => "pub$_") } 1 .. 10;
	$_->query_safe('BEGIN') foreach @p;
	$_->query_safe("SELECT zk_enqueue('pub', repeat('p', $ITEM))") foreach @p;
	my $w = worker_pid($node);
	kill 'STOP', $w;
	$_->send('COMMIT') foreach @p;
	sleep 2;
	kill 'CONT', $w;
	my ($ok, $refused, $other) = (0, 0, 0);
	my $hinted = 0;
	foreach my $s (@p)
	{
		my $r = $s->wait(60);
		if ($r->{sqlstate} eq '00000')
		{
			$ok++;
		}
		elsif ($r->{sqlstate} eq '53200')
		{
			$refused++;
			$hinted++ if $r->{err} =~ /out of zklock payload memory/
			  && $r->{err} =~ /zklock\.max_payload_memory is 6144 kB/
			  && $r->{err} =~ /HINT:.*publishes nothing/;
		}
		else
		{
			$other++;
			diag "C2: a COMMIT ended with $r->{sqlstate}: $r->{err}";
		}
	}
	note "C2: $ok COMMITs published, $refused refused";
	ok($refused >= 1, "C2: COMMITs whose items found no room failed with 53200 ($refused of 10)");
	is($hinted, $refused, 'C2: each says "out of zklock payload memory", with the setting and a hint');
	is($other, 0, 'C2: the others committed');
	ok(zk_wait_count($zk, qpath('pub') . '/entries', $ok, 20),
		"C2: exactly the $ok committed items are published");
	ok(zk_wait_count($zk, '/zklock/txns', 0, 20), 'C2: no transaction node is left');
	$_->quit foreach @p;
	is($F->query_safe("SELECT count(*) FROM zk_dequeue('pub', '0', 1000)"), $ok,
		'C2: and they can be dequeued');
}

# 3. consumers and producers at once
{
	fill($F, 'mix', 16);
	my @c = map { new_session($node, name => "cons$_") } 1 .. 4;
	my @p = map { new_session($node, name => "prod$_") } 1 .. 2;
	$_->query_safe("SET zklock.max_answer_bytes = '16MB'") foreach @c;
	my %seen;
	my ($dup, $taken, $c_refused, $p_ok, $p_refused, $other, $calls) = (0, 0, 0, 0, 0, 0, 0);
	my $produced = 0;
	my $t0 = time();
	my $empty_rounds = 0;
	while (time() - $t0 < 120)
	{
		my $producing = ($produced < 20);
		foreach my $s (@c)
		{
			$s->send("SELECT coalesce(string_agg(msg_id::text, ','), '-') FROM zk_dequeue('mix', '0', 1000)");
		}
		if ($producing)
		{
			foreach my $s (@p)
			{
				$produced++;
				$s->send("SELECT zk_enqueue('mix', repeat('m', $ITEM))");
			}
		}
		my $got = 0;
		foreach my $s (@c)
		{
			my $r = $s->wait(60);
			$calls++;
			if ($r->{sqlstate} eq '00000')
			{
				next if $r->{out} eq '-';
				foreach my $id (split /,/, $r->{out})
				{
					$got++;
					$taken++;
					$dup++ if $seen{$id}++;
				}
			}
			elsif ($r->{sqlstate} eq '53200') { $c_refused++; }
			else
			{
				$other++;
				diag "C3: a dequeue ended with $r->{sqlstate}: $r->{err}";
			}
		}
		if ($producing)
		{
			foreach my $s (@p)
			{
				my $r = $s->wait(60);
				if ($r->{sqlstate} eq '00000') { $p_ok++; }
				elsif ($r->{sqlstate} eq '53200') { $p_refused++; }
				else
				{
					$other++;
					diag "C3: an enqueue ended with $r->{sqlstate}: $r->{err}";
				}
			}
		}
		$empty_rounds = ($got == 0 && !$producing) ? $empty_rounds + 1 : 0;
		last if $empty_rounds >= 2;
	}
	note sprintf('C3: %.1fs, %d dequeues took %d items, %d refused with 53200; %d enqueues committed, %d refused',
		time() - $t0, $calls, $taken, $c_refused, $p_ok, $p_refused);
	is($other, 0, 'C3: every call succeeded or failed with 53200');
	is($dup, 0, 'C3: no item was taken twice');
	is($taken, 16 + $p_ok, 'C3: every item was taken: the 16 there and each one committed meanwhile');
	is(zk_count($zk, qpath('mix') . '/entries'), 0, 'C3: no item left in ZooKeeper');
	is(zk_count($zk, qpath('mix') . '/taken'), 0, 'C3: no claim left in ZooKeeper');
	$_->quit foreach (@c, @p);
}

is(zk_status_value($node, 'state'), 'connected', 'C: the worker is connected');
is(zk_status_value($node, 'session_id'), $sid, 'C: it kept its ZooKeeper session throughout');
is(worker_pid($node), $wpid, 'C: and did not restart');
is(zk_status_value($node, 'lost'), '0', 'C: no lock was lost');
is($L->query_safe("SELECT zk_lock_token('kept') IS NOT NULL"), 't', 'C: the session lock is still held');
is(scalar(zk_children($zk, $node->safe_psql('postgres', "SELECT zk_path('lock', 'kept')"))), 1,
	'C: its node is still in ZooKeeper');

# 4. a reload raising the limit is applied by the worker
{
	$node->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_payload_memory = '64MB'");
	$node->reload;
	ok(wait_until(sub { show_limit() eq '64MB' }, 10, 0.2),
		'C4: the new limit is in force');
	sleep 1;						# the worker's next turn applies it
	my $s = new_session($node, name => 'lim2');
	$s->query_safe("SET zklock.max_answer_bytes = '16MB'");
	$s->query_safe('BEGIN');
	my $n = $s->query_safe("SELECT count(*) FROM zk_dequeue('lim', '0', 1000)");
	note "C4: the same dequeue now returns $n items (under 6 MB: $lim_n)";
	ok($n > $lim_n && $n <= 18, 'C4: with 64 MB it returns more: what its 16 MB cap allows');
	$s->query_safe('ROLLBACK');
	is($s->query_safe("SELECT zk_queue_length('lim')"), 20 - $lim_n, 'C4: ROLLBACK gave them back');
	$s->quit;
}

$L->query_safe("SELECT zk_unlock_all()");
$L->quit;
$F->quit;
$node->stop;
done_testing();
