
# 330_queue_attack.pl - a hostile review of the queue: every attack below is
# checked against the state in ZooKeeper (counted through kazoo, never
# through SQL) and in tables written in the same transactions.
#
# The node talks to ZooKeeper through test/zkproxy.py, so replies can be
# lost at exact points:
#   A. the claim multi's reply lost after it landed: the item is ours (or
#      released), never lost or taken twice; consumed once at COMMIT
#   B. the release multi's reply lost (ROLLBACK) while another consumer
#      takes the item: the other consumer's claim survives the retry
#   C. the consume multi's reply lost: consumed exactly once, nothing left
#   D. the transaction node's create reply lost, E. the publish multi's
#      reply lost: the items appear exactly once
#   F. cancel while the claim multi's reply is delayed: item back, no claim
#   G. max_items beyond what is there, timeout 0 (empty, full, all claimed)
#   H. foreign garbage in entries/ and taken/, claims naming this cluster
#      with a committed, an aborted and an unparseable transaction id,
#      written by another client: none carries this cluster's MAC, so the
#      worker's resolution after a worker restart leaves them all alone
#      with their items (the window for an older version's unsigned nodes
#      closed with the start's first settling pass; until then the first
#      claim's item was consumed)
#   I. a foreign client deletes the queue while consumers wait
#   J. LATIN1 and UTF8 databases share one queue; payload text conversion
#   K. zk_queue_purge against held claims and racing with waiting consumers
#   L. zk_queue_release_cluster of a fake dead cluster (claims, txn nodes)
#   M. 30 waiters, 1000 items in one transaction: each item once, every
#      waiter served, no watch left (mntr's zk_watch_count)
#   N. the worker SIGSTOPped past the session timeout while a consumer
#      commits, a producer commits and a consumer waits
#   O. the worker SIGKILLed (crash restart) after consumers committed and
#      rolled back, and after producers committed while publication hung
#   Q. the worker terminated (no crash restart: the claims' entries outlive
#      it in shared memory) while consumers hold claims; they commit or roll
#      back before the new worker runs: the new worker consumes and releases
#      them (it once left them on the dead worker's retry list, for ever)
#   P. transactions whose ZooKeeper request would exceed jute.maxbuffer
#      although zklock's own size checks accept them: 700 items consumed
#      from a queue whose name is percent-encoded, 1024 items enqueued into
#      it, 13000 empty items enqueued into 13 queues
#   S. a long queue drained while entries' version shows only our own
#      consumes (the worker reuses what a listing left): FIFO order, few
#      listings; a kazoo item of priority 0, items consumed by another
#      client, an item rolled back here and one published here are each
#      seen at the next dequeue
#   R. a queue of 20,000 items (put by kazoo): length, a peek and a purge
#      that take longer than zklock.connect_timeout complete while ZooKeeper
#      keeps answering; a lock request is answered in the meantime; a purge
#      cancelled halfway stops deleting and leaves no claim

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep sleep);
use JSON::PP;
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $node = zk_node('qattack', $p->{hosts},
	session_timeout => '6s',
	connect_timeout => '3s',
	conf => "zklock.commit_timeout = '3s'\nmax_connections = 80\nrestart_after_crash = on\n"
	  . "zklock.max_transaction_size = '976kB'\n");

my $ROOT = '/zklock';
my $Q = "$ROOT/queues";
my $TXNS = "$ROOT/txns";
my $HELPER = "$ZkLockTest::SRC/test/queue_attack.py";
my $sysid = $node->safe_psql('postgres', 'SELECT system_identifier FROM pg_control_system()');

# test/queue_attack.py; returns stdout (chomped), dies unless rc is 0 or
# one of @ok
sub qa
{
	my ($verb, @args) = @_;
	my ($rc, $out, $err) = ZkLockTest::_run([ $ZkLockTest::PYTHON, $HELPER, $zk->{hosts}, $verb, @args ], 120);
	die "queue_attack.py $verb @args: rc $rc: $out $err" if $rc != 0 && $rc != 1;
	chomp $out;
	return wantarray ? ($rc, $out) : $out;
}

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub n_entries { return zk_count($zk, "$Q/$_[0]/entries"); }

# listings the node sent (entries are listed with getChildren2, taken with getChildren)
sub listings
{
	my $r = proxy_stats($p)->{requests};
	return ($r->{getChildren} // 0) + ($r->{getChildren2} // 0);
}
sub n_taken { return zk_count($zk, "$Q/$_[0]/taken"); }
sub entry_names { return qa('children', "$Q/$_[0]/entries") =~ /(\S+)/g; }

# claims of queue $q: list of [ name, decoded data or undef ]
sub claims
{
	my ($q) = @_;
	my @c;
	foreach my $line (split /\n/, qa('claims', "$Q/$q"))
	{
		my ($n, $d) = split /\t/, $line, 2;
		my $j = eval { decode_json($d // '') };
		push @c, [ $n, $j ];
	}
	return @c;
}

# wait until queue $q has $e entries and $t claims; returns "entries/taken"
sub wait_queue
{
	my ($q, $e, $t, $secs) = @_;
	my $got;
	wait_until(sub { $got = n_entries($q) . '/' . n_taken($q); $got eq "$e/$t" }, $secs // 10, 0.2);
	return $got;
}

# the payloads of queue $q's entries, as text, sorted
sub payloads
{
	my ($q) = @_;
	my @p;
	foreach my $n (entry_names($q))
	{
		my $h = qa('gethex', "$Q/$q/entries/$n");
		push @p, pack('H*', $h);
	}
	return sort @p;
}

sub wait_stat
{
	my ($kind, $op, $base, $secs) = @_;
	return wait_until(sub { (proxy_stats($p)->{$kind}{$op} // 0) > $base }, $secs // 10, 0.02);
}


sub settle_proxy
{
	proxy_cmd($p, 'reset');
	my $st = wait_for_state($node, 'connected', 30);
	die "not connected again: $st->{state}" unless $st->{state} eq 'connected';
}

sql('CREATE TABLE consumed (q text, msg_id bigint, body text, who int)');
# nobody waits yet: the watches ZooKeeper holds now are not the queue's
my $WC0 = zk_watch_count($zk);

#
# A. the claim multi's reply lost after it landed
#
{
	sql("SELECT zk_enqueue('qa_a', 'a-one')");
	is(n_entries('qa_a'), 1, 'A: one item');
	my $cut = proxy_rule($p, 'cut-after-request multi');
	my $c = new_session($node, name => 'a_cons');
	$c->query_safe('BEGIN');
	my $r = $c->query("SELECT msg_id || ' ' || body FROM zk_dequeue('qa_a', '15s')", 40);
	ok(proxy_wait_fired($p, $cut, 5), 'A: the proxy cut the connection when the claim multi had landed');
	is($r->{sqlstate}, '00000', 'A: the dequeue did not fail') or diag $r->{err};
	if (($r->{out} // '') =~ /^(\d+) a-one$/)
	{
		my $id = $1;
		my @cl = claims('qa_a');
		is(scalar(@cl), 1, 'A: exactly one claim while we hold the item');
		is($cl[0][1] && $cl[0][1]{pid}, $c->pid, 'A: the claim is ours (its data names our backend)');
		$c->query_safe("INSERT INTO consumed VALUES ('qa_a', $id, 'a-one', 1)");
		$c->query_safe('COMMIT');
		is(wait_queue('qa_a', 0, 0), '0/0', 'A: COMMIT consumed the item and its claim');
	}
	else
	{
		# in doubt and given up: the claim must be gone, the item back
		$c->query_safe('ROLLBACK');
		is(wait_queue('qa_a', 1, 0), '1/0', 'A: no row: no claim left, the item is still there');
		is(sql("SELECT body FROM zk_try_dequeue('qa_a')"), 'a-one', 'A: and can be taken');
		sql("SELECT zk_queue_purge('qa_a')");
	}
	$c->quit;
	settle_proxy();
}

#
# B. the release multi's reply lost while another consumer takes the item
#
{
	sql("SELECT zk_enqueue('qa_b', 'b-one')");
	my $a = new_session($node, name => 'b_first');
	my $b = new_session($node, name => 'b_second');
	$a->query_safe('BEGIN');
	is($a->query_safe("SELECT body FROM zk_dequeue('qa_b', '10s')"), 'b-one', 'B: the first consumer claims the item');
	$b->query_safe('BEGIN');
	my $cut = proxy_rule($p, 'cut-after-request multi');
	$a->query_safe('ROLLBACK');
	ok(proxy_wait_fired($p, $cut, 5), 'B: the reply of the release multi was lost');
	my $r = $b->query("SELECT msg_id || ' ' || body FROM zk_dequeue('qa_b', '15s')", 30);
	like($r->{out} // '', qr/^\d+ b-one$/, 'B: the second consumer gets the released item')
	  or diag $r->{err};
	sleep 3;    # the first consumer's retry verifies its claim meanwhile
	my @cl = claims('qa_b');
	is(scalar(@cl) . ' ' . ($cl[0] && $cl[0][1] ? $cl[0][1]{pid} : 'none'), '1 ' . $b->pid,
		"B: the second consumer's claim survives the first consumer's retried release");
	is(n_entries('qa_b'), 1, 'B: the item is still there while claimed');
	my ($id) = ($r->{out} // '0') =~ /^(\d+)/;
	$b->query_safe("INSERT INTO consumed VALUES ('qa_b', $id, 'b-one', 2)");
	$b->query_safe('COMMIT');
	is(wait_queue('qa_b', 0, 0), '0/0', 'B: consumed by the second consumer, nothing left');
	$a->quit;
	$b->quit;
	settle_proxy();
}

#
# B2. the release multi's reply lost while another consumer already waits:
# the waiter must not sleep until its timeout (no change of entries follows,
# and the release is this cluster's own)
#
{
	sql("SELECT zk_enqueue('qa_b2', 'b2-one')");
	my $a = new_session($node, name => 'b2_first');
	my $b = new_session($node, name => 'b2_second');
	$a->query_safe('BEGIN');
	is($a->query_safe("SELECT body FROM zk_dequeue('qa_b2', '10s')"), 'b2-one', 'B2: the first consumer claims the item');
	$b->query_safe('BEGIN');
	$b->send("SELECT msg_id || ' ' || body FROM zk_dequeue('qa_b2', '40s')");
	ok(wait_until(sub { sql("SELECT local_waiting FROM zk_queues WHERE queue = 'qa_b2'") eq '1' }, 10, 0.1),
		'B2: the second consumer waits');
	my $cut = proxy_rule($p, 'cut-after-request multi');
	$a->query_safe('ROLLBACK');
	ok(proxy_wait_fired($p, $cut, 5), 'B2: the reply of the release multi was lost');
	my $r = $b->wait(30);
	like($r->{out} // '', qr/^\d+ b2-one$/, 'B2: the waiting consumer gets the released item')
	  or diag explain $r;
	cmp_ok($r->{elapsed} // 99, '<', 25, 'B2: long before its 40 s timeout');
	if (($r->{out} // '') =~ /^(\d+)/)
	{
		$b->query_safe("INSERT INTO consumed VALUES ('qa_b2', $1, 'b2-one', 2)");
		$b->query_safe('COMMIT');
	}
	else
	{
		$b->query('ROLLBACK');
	}
	is(wait_queue('qa_b2', 0, 0), '0/0', 'B2: consumed, nothing left');
	$a->quit;
	$b->quit;
	settle_proxy();
}

#
# C. the consume multi's reply lost after COMMIT
#
{
	sql("SELECT zk_enqueue('qa_c', 'c-' || i) FROM generate_series(1, 3) i");
	my $c = new_session($node, name => 'c_cons');
	$c->query_safe('BEGIN');
	$c->query_safe("INSERT INTO consumed SELECT 'qa_c', msg_id, body, 3 FROM zk_dequeue('qa_c', '10s', 3)");
	is(n_taken('qa_c'), 3, 'C: three claims');
	my $cut = proxy_rule($p, 'cut-after-request multi');
	$c->query_safe('COMMIT');
	ok(proxy_wait_fired($p, $cut, 5), 'C: the consume multi landed and its reply was lost');
	settle_proxy();
	is(wait_queue('qa_c', 0, 0), '0/0', 'C: nothing left: items and claims deleted');
	is(sql("SELECT count(*) || '/' || count(DISTINCT msg_id) FROM consumed WHERE q = 'qa_c'"), '3/3',
		'C: the three items were consumed once each');
	is(sql("SELECT count(*) FROM zk_try_dequeue('qa_c', 10)"), '0', 'C: the queue gives nothing more');
	$c->quit;
}

#
# D. the transaction node's create reply lost; E. the publish multi's reply
#    lost.  Either COMMIT succeeds and the items are there once, or it fails
#    and nothing is there.
#
foreach my $case ([ 'D', 'qa_d', 'create' ], [ 'E', 'qa_e', 'multi' ])
{
	my ($tag, $q, $op) = @$case;
	# warm up: parents known, so the next create is the transaction node's
	sql("SELECT zk_enqueue('$q', 'warm')");
	sql("SELECT zk_queue_purge('$q')");
	my $cut = proxy_rule($p, "cut-after-request $op");
	my $s = new_session($node, name => "${tag}_prod");
	$s->query_safe('BEGIN');
	$s->query_safe("SELECT zk_enqueue('$q', '$tag-' || i) FROM generate_series(1, 5) i");
	my $r = $s->query('COMMIT', 30);
	ok(proxy_wait_fired($p, $cut, 5), "$tag: the $op landed and its reply was lost");
	settle_proxy();
	my $want = $r->{sqlstate} eq '00000' ? 5 : 0;
	note "$tag: COMMIT ended with $r->{sqlstate}: $r->{err}";
	is($r->{sqlstate}, '00000', "$tag: COMMIT succeeded (the worker sorts the lost reply out)");
	is(wait_queue($q, $want, 0), "$want/0", "$tag: $want items in ZooKeeper");
	sleep 1.5;
	is(join(',', payloads($q)), join(',', map { "$tag-$_" } 1 .. $want) =~ s/^,$//r,
		"$tag: each item exactly once, nothing duplicated by the retry");
	# one whose create's reply was lost is published but kept against a
	# late create (src/queue/queue_publish.c, "Late creates"): not left behind
	my ($pending, $kept) = zk_txns_pending($zk, $TXNS);
	is($pending, 0, "$tag: no transaction node left");
	ok($kept >= 1, "$tag: the published node is kept (its create's reply was lost)")
	  if $op eq 'create';
	sql("SELECT zk_queue_purge('$q')");
	$s->quit;
}

#
# F. cancel while the claim multi's reply is delayed
#
{
	sql("SELECT zk_enqueue('qa_f', 'f-one')");
	my $base = proxy_stats($p)->{requests}{multi} // 0;
	my $delay = proxy_rule($p, 'delay-replies multi 2500');
	my $c = new_session($node, name => 'f_cons');
	$c->query_safe('BEGIN');
	$c->send("SELECT body FROM zk_dequeue('qa_f', '20s')");
	ok(wait_stat('requests', 'multi', $base, 10), 'F: the claim multi was sent');
	sql('SELECT pg_cancel_backend(' . $c->pid . ')');
	my $r = $c->wait(20);
	is($r->{sqlstate}, '57014', 'F: the consumer was cancelled during the claim round') or diag $r->{out};
	$c->query_safe('ROLLBACK');
	proxy_cmd($p, "clear $delay");
	is(wait_queue('qa_f', 1, 0, 15), '1/0', 'F: the claim made under the cancel is deleted, the item stays');
	is(sql("SELECT body FROM zk_try_dequeue('qa_f')"), 'f-one', 'F: the item can be taken again');
	ok(wait_until(sub { zk_watch_count($zk) == $WC0 }, 10, 0.3), 'F: no watch left on the queue')
	  or diag 'watches: ' . zk_watch_count($zk) . " (before: $WC0)";
	sql("SELECT zk_queue_purge('qa_f')");
	$c->quit;
	settle_proxy();
}

#
# G. max_items beyond what is there; timeouts of 0
#
{
	sql("SELECT zk_enqueue('qa_g', 'g-' || i) FROM generate_series(1, 3) i");
	my $c = new_session($node, name => 'g_cons');
	$c->query_safe('BEGIN');
	is($c->query_safe("SELECT string_agg(body, ',') FROM zk_try_dequeue('qa_g', 1000)"), 'g-1,g-2,g-3',
		'G: zk_try_dequeue(max_items 1000) takes the three there are');
	is(n_taken('qa_g'), 3, 'G: three claims');
	my $o = new_session($node, name => 'g_other');
	my $t0 = time();
	is($o->query_safe("SELECT count(*) FROM zk_dequeue('qa_g', '0', 5)"), '0',
		'G: timeout 0 while every item is claimed: no row');
	ok(time() - $t0 < 3, 'G: and at once');
	$c->query_safe('ROLLBACK');
	is(wait_queue('qa_g', 3, 0), '3/0', 'G: ROLLBACK released the three');
	$c->query_safe('BEGIN');
	is($c->query_safe("SELECT count(*) FROM zk_dequeue('qa_g', '0', 1000)"), '3',
		'G: timeout 0 with items there still takes them');
	$c->query_safe('ROLLBACK');
	$t0 = time();
	is($o->query_safe("SELECT count(*) FROM zk_dequeue('qa_g_empty', '0 s', 1000)"), '0',
		'G: timeout 0 on an empty queue: no row');
	ok(time() - $t0 < 3, 'G: and at once');
	is(wait_queue('qa_g', 3, 0), '3/0', 'G: no claim left');
	ok(wait_until(sub { zk_watch_count($zk) == $WC0 }, 10, 0.3), 'G: no watch left on the queues')
	  or diag 'watches: ' . zk_watch_count($zk) . " (before: $WC0)";
	is(sql("SELECT coalesce(sum(local_waiting + local_claims), 0) FROM zk_queues WHERE queue LIKE 'qa_g%'"), '0',
		'G: zk_queues: no local waiter or claim');
	sql("SELECT zk_queue_purge('qa_g')");
	$c->quit;
	$o->quit;
}

#
# H. foreign garbage; claims naming this cluster settled by a worker restart
#
{
	my $q = 'qa_h';
	sql("SELECT zk_enqueue('$q', 'h-' || i) FROM generate_series(1, 4) i");
	my @names = entry_names($q);
	is(scalar(@names), 4, 'H: four real items');
	my $long = 'entry-100-' . ('7' x 300);
	qa('create', "$Q/$q/entries/$_", unpack('H*', 'garbage')) foreach ('x', 'entry-abc-1', $long, 'entry-1000-1');
	qa('create', "$Q/$q/taken/entry-100-9999999999", unpack('H*', '{"cluster":"' . $sysid . '"}'));
	# a committed and an aborted transaction of this cluster
	my $xc = sql('BEGIN; SELECT pg_current_xact_id(); COMMIT;');
	my $xa = sql('BEGIN; SELECT pg_current_xact_id(); ROLLBACK;');
	my $tli = sql('SELECT timeline_id FROM pg_control_checkpoint()');
	my $claim = sub {
		my ($n, $data) = @_;
		qa('create', "$Q/$q/taken/$n", unpack('H*', $data));
	};
	$claim->($names[0], qq({"cluster":"$sysid","xid":"$xc","tli":$tli,"lsn":"0","claim":"fake1"}));
	$claim->($names[1], qq({"cluster":"$sysid","xid":"$xa","tli":$tli,"lsn":"0","claim":"fake2"}));
	$claim->($names[2], qq({"cluster":"$sysid","xid":"not-a-number","tli":x,"lsn":"zz"}));
	is(sql("SELECT zk_queue_length('$q')"), '1', 'H: zk_queue_length counts the one unclaimed real item');
	is(sql("SELECT string_agg(body, ',') FROM zk_queue_peek('$q', 100)"), 'h-4', 'H: peek shows only it');
	my $c = new_session($node, name => 'h_cons');
	$c->query_safe('BEGIN');
	is($c->query_safe("SELECT string_agg(body, ',') FROM zk_try_dequeue('$q', 100)"), 'h-4',
		'H: a dequeue takes only the real unclaimed item, no foreign node');
	$c->query_safe('ROLLBACK');
	is(zk_status_value($node, 'state'), 'connected', 'H: the worker is fine');

	# the worker restarts and settles this cluster's claims from the commit log
	my $hpos = -s $node->logfile;
	my $old = worker_pid($node);
	sql("SELECT pg_terminate_backend($old)");
	ok(wait_for_worker($node, $old, 30), 'H: the worker restarted');
	wait_for_state($node, 'connected', 30);
	ok(wait_until(sub { substr(slurp_file($node->logfile), $hpos) =~ /left the queue claim \S+\Q$names[1]\E alone: it has no MAC/ }, 15, 0.3),
		'H: the resolution refused the claims without a MAC');
	ok(zk_exists($zk, "$Q/$q/entries/$names[0]") && zk_exists($zk, "$Q/$q/taken/$names[0]"),
		'H: the claim naming a committed transaction is left alone: its item is not consumed');
	ok(zk_exists($zk, "$Q/$q/entries/$names[1]") && zk_exists($zk, "$Q/$q/taken/$names[1]"),
		'H: the claim naming an aborted transaction is left alone with its item');
	ok(zk_exists($zk, "$Q/$q/taken/$names[2]") && zk_exists($zk, "$Q/$q/entries/$names[2]"),
		'H: an unparseable claim naming this cluster is left alone with its item');
	is(join(',', sort grep { !/^entry-\d{3}-\d{10}$/ } entry_names($q)), join(',', sort('x', 'entry-abc-1', $long, 'entry-1000-1')),
		'H: the foreign entries are untouched');
	is(sql("SELECT zk_queue_purge('$q')"), '1', 'H: purge deletes the one unclaimed real item only');
	is(join(',', sort(entry_names($q))), join(',', sort('x', 'entry-abc-1', $long, 'entry-1000-1', @names[0 .. 2])),
		'H: purge left the foreign entries and the claimed items');
	is(zk_status_value($node, 'state'), 'connected', 'H: the worker is still fine');
	qa('rmtree', "$Q/$q");
	$c->quit;
}

#
# I. a foreign client deletes the queue while consumers wait
#
{
	my $q = 'qa_i';
	sql("SELECT zk_enqueue('$q', 'warm'); SELECT zk_queue_purge('$q')");
	my @w = map { new_session($node, name => "i_w$_") } 1 .. 2;
	$_->query_safe('BEGIN') foreach @w;
	$_->send("SELECT body FROM zk_dequeue('$q', '40s')") foreach @w;
	ok(wait_until(sub { sql("SELECT local_waiting FROM zk_queues WHERE queue = '$q'") eq '2' }, 10),
		'I: two consumers wait');
	my $cz0 = zk_czxid($zk, "$Q/$q/entries") // -1;
	qa('rmtree', "$Q/$q");
	# the worker recreates the nodes at once (its watch fires): a new czxid
	ok(wait_until(sub { (zk_czxid($zk, "$Q/$q/entries") // $cz0) != $cz0 }, 10, 0.2),
		'I: a foreign client deleted the queue node (the worker recreated it)');
	sleep 1;
	my $b0 = listings();
	sleep 2;
	my $b1 = listings();
	ok($b1 - $b0 < 20, sprintf('I: no busy relisting of the deleted queue (%d listings in 2 s)', $b1 - $b0));
	qa('put', "$Q/$q", 'i-1');
	qa('put', "$Q/$q", 'i-2');
	my @got;
	foreach my $s (@w)
	{
		my $r = $s->wait(20);
		push @got, $r->{out} // '';
	}
	is(join(',', sort @got), 'i-1,i-2', 'I: both waiters got one item each after the queue was recreated');
	$_->query_safe('COMMIT') foreach @w;
	is(wait_queue($q, 0, 0), '0/0', 'I: consumed');
	$_->quit foreach @w;
}

#
# J. LATIN1 and UTF8 databases: one queue, payload text converted
#
{
	sql("CREATE DATABASE lat ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql('lat', 'CREATE EXTENSION zklock');
	my $lname = "convert_from('\\x636166e9'::bytea, 'LATIN1')";    # café in LATIN1
	my $uname = "convert_from('\\x636166c3a9'::bytea, 'UTF8')";    # café in UTF8
	$node->safe_psql('lat', "SELECT zk_enqueue($lname, convert_from('\\x6372e86d65'::bytea, 'LATIN1'))");
	is(n_entries('caf%C3%A9'), 1, 'J: the LATIN1 name is the UTF-8 path caf%C3%A9');
	my ($n) = entry_names('caf%C3%A9');
	is(qa('gethex', "$Q/caf%C3%A9/entries/$n"), '6372c3a86d65', 'J: the LATIN1 text payload is stored as UTF-8');
	is(sql("SELECT encode(convert_to(body, 'UTF8'), 'hex') || ' ' || encode(payload, 'hex') FROM zk_try_dequeue($uname)"),
		'6372c3a86d65 6372c3a86d65', 'J: the UTF8 database takes it from the same queue, body and payload');
	sql("SELECT zk_enqueue($uname, convert_from('\\xc3a9e282ac'::bytea, 'UTF8'))");    # é€
	sql("SELECT zk_enqueue($uname, convert_from('\\xc3a9'::bytea, 'UTF8'))");          # é
	is($node->safe_psql('lat',
			"SELECT string_agg(coalesce(encode(convert_to(body, 'LATIN1'), 'hex'), 'NULL') || ':' || encode(payload, 'hex'), ' ') FROM zk_try_dequeue($lname, 5)"),
		'NULL:c3a9e282ac e9:c3a9',
		'J: in LATIN1: body NULL where not representable, converted where it is; payload bytes intact');
	is($node->safe_psql('lat', "SELECT count(*) FROM zk_queues WHERE queue = $lname"), '1',
		'J: zk_queues in the LATIN1 database names the queue in its encoding');
	sql("SELECT zk_queue_purge($uname)");
}

#
# K. purge against held claims and racing with waiting consumers
#
{
	my $q = 'qa_k';
	sql("SELECT zk_enqueue('$q', 'k-' || i) FROM generate_series(1, 10) i");
	my $h = new_session($node, name => 'k_holder');
	$h->query_safe('BEGIN');
	$h->query_safe("INSERT INTO consumed SELECT '$q', msg_id, body, 10 FROM zk_try_dequeue('$q', 4)");
	is(sql("SELECT zk_queue_purge('$q')"), '6', 'K: purge deletes the six unclaimed items');
	is(n_entries($q) . '/' . n_taken($q), '4/4', 'K: the four claimed items survive the purge');
	$h->query_safe('COMMIT');
	is(wait_queue($q, 0, 0), '0/0', 'K: their consumer commits them');

	# race: five consumers wait, 40 items arrive, purge runs at once
	my @w = map { new_session($node, name => "k_w$_") } 1 .. 5;
	foreach my $i (0 .. $#w)
	{
		$w[$i]->query_safe('BEGIN');
		$w[$i]->send("INSERT INTO consumed SELECT '$q', msg_id, body, 20 + $i FROM zk_dequeue('$q', '6s', 3)");
	}
	ok(wait_until(sub { sql("SELECT local_waiting FROM zk_queues WHERE queue = '$q'") eq '5' }, 10),
		'K: five consumers wait');
	my $pr = new_session($node, name => 'k_prod');
	my $pu = new_session($node, name => 'k_purge');
	$pr->query_safe("SELECT zk_enqueue('$q', 'r-' || i) FROM generate_series(1, 40) i");
	my $purged = 0;
	$pu->send("SELECT zk_queue_purge('$q')");
	my $pr_r = $pu->wait(30);
	$purged = $pr_r->{out} if $pr_r->{sqlstate} eq '00000';
	$_->wait(30) foreach @w;
	my $claimed = n_taken($q);
	is(n_entries($q), $claimed, 'K: after the race, the entries left are exactly the claimed ones');
	$_->query_safe('COMMIT') foreach @w;
	is(wait_queue($q, 0, 0), '0/0', 'K: consumers committed: nothing left');
	my $cons = sql("SELECT count(*) || '/' || count(DISTINCT body) FROM consumed WHERE q = '$q' AND body LIKE 'r-%'");
	my ($nc) = $cons =~ /^(\d+)/;
	is($cons, "$nc/$nc", 'K: no item consumed twice');
	is($nc + $purged, 40, "K: consumed ($nc) + purged ($purged) = 40: every item either purged or consumed, once");
	$_->quit foreach (@w, $pr, $pu, $h);
}

#
# L. zk_queue_release_cluster of a fake dead cluster
#
{
	my $q = 'qa_l';
	sql("SELECT zk_enqueue('$q', 'l-' || i) FROM generate_series(1, 6) i");
	my @n = entry_names($q);
	my $mine = new_session($node, name => 'l_mine');
	$mine->query_safe('BEGIN');
	is($mine->query_safe("SELECT body FROM zk_try_dequeue('$q')"), 'l-1', 'L: this cluster holds a claim on l-1');
	qa('create', "$Q/$q/taken/$n[1]", unpack('H*', '{"cluster":"123","xid":"1000","tli":1,"lsn":"0","claim":"x"}'));
	qa('create', "$Q/$q/taken/$n[2]", unpack('H*', '{"cluster":"123","xid":"1001","tli":1,"lsn":"16B0000"}'));
	qa('create', "$Q/$q/taken/$n[3]", unpack('H*', '{"cluster":"1234","xid":"1000","tli":1,"lsn":"0"}'));
	qa('create', "$Q/$q/taken/$n[4]", unpack('H*', '{"cluster":"123"}'));
	qa('create', "$TXNS/123-777", unpack('H*', 'whatever'));
	qa('create', "$TXNS/123-778", '-');
	qa('create', "$TXNS/1234-5", '-');
	qa('create', "$TXNS/$sysid-1", '-');
	my $r = sql("SELECT zk_queue_release_cluster('123')");
	ok(!zk_exists($zk, "$Q/$q/taken/$n[1]") && !zk_exists($zk, "$Q/$q/taken/$n[2]"),
		"L: cluster 123's claims (zklock's format) are released");
	ok(!zk_exists($zk, "$TXNS/123-777") && !zk_exists($zk, "$TXNS/123-778"), "L: cluster 123's transaction nodes are dropped");
	ok(zk_exists($zk, "$Q/$q/taken/$n[3]") && zk_exists($zk, "$TXNS/1234-5"),
		'L: cluster 1234 (same prefix) is not touched');
	ok(zk_exists($zk, "$Q/$q/taken/$n[0]") && zk_exists($zk, "$TXNS/$sysid-1"),
		"L: this cluster's own claim and transaction node are not touched");
	is(n_entries($q), 6, 'L: no item deleted');
	ok(!zk_exists($zk, "$Q/$q/taken/$n[4]"), 'L: a claim whose data names cluster 123 but nothing else is released too')
	  or diag "data {\"cluster\":\"123\"} left: every claim of the cluster should go";
	is($r, 5, 'L: the count is the number of nodes removed (4 claims/txns + the bare claim)');
	$mine->query_safe('ROLLBACK');
	qa('rmtree', "$Q/$q");
	qa('rmtree', "$TXNS/1234-5");
	qa('rmtree', "$TXNS/$sysid-1");
	qa('rmtree', "$TXNS/123-777");
	$mine->quit;
}

#
# M. 30 waiters, 1000 items published by one transaction
#
{
	my $q = 'qa_m';
	sql(q{CREATE TABLE got (msg_id bigint, who int, round int)});
	sql(qq{CREATE PROCEDURE drain(who int) LANGUAGE plpgsql AS \$\$
DECLARE n int; r int := 0;
BEGIN
  LOOP
    INSERT INTO got SELECT msg_id, who, r FROM zk_dequeue('$q', CASE WHEN r = 0 THEN interval '60s' ELSE interval '2s' END, 20);
    GET DIAGNOSTICS n = ROW_COUNT;
    COMMIT;
    EXIT WHEN n = 0;
    r := r + 1;
  END LOOP;
END \$\$});
	my @w = map { new_session($node, name => "m_w$_") } 1 .. 30;
	$w[$_]->send("CALL drain($_)") foreach 0 .. $#w;
	ok(wait_until(sub { sql("SELECT local_waiting FROM zk_queues WHERE queue = '$q'") eq '30' }, 30),
		'M: thirty consumers wait');
	# listings of this queue's items only: a settling pass of the worker lists every queue's
	# claims and may run in these 2 s on a loaded machine (that is not the waiters' cost)
	my $ent = "$Q/$q/entries";
	my $g0 = proxy_stats($p)->{listed}{$ent} // 0;
	my $a0 = listings();
	sleep 2;
	my $g1 = proxy_stats($p)->{listed}{$ent} // 0;
	my $a1 = listings();
	ok($g1 - $g0 < 3, sprintf('M: the waiting consumers cost no re-listing (%d listings of %s in 2 s, %d listings in all)',
		$g1 - $g0, $ent, $a1 - $a0));
	is(zk_watch_count($zk) - $WC0, 2, 'M: two watches for thirty waiters (the items, and the delayed items)');
	sql("SELECT count(zk_enqueue('$q', i::text)) FROM generate_series(1, 1000) i");
	my $ok = 1;
	foreach my $s (@w)
	{
		my $r = $s->wait(90);
		$ok = 0 unless $r->{sqlstate} eq '00000';
	}
	ok($ok, 'M: every consumer finished');
	is(sql(q{SELECT count(*) || '/' || count(DISTINCT msg_id) FROM got}), '1000/1000', 'M: 1000 items, each taken once');
	is(sql('SELECT count(DISTINCT who) FROM got WHERE round = 0'), '30', 'M: every waiter was served by the publication');
	is(n_entries($q) . '/' . n_taken($q), '0/0', 'M: nothing left in ZooKeeper');
	ok(wait_until(sub { zk_watch_count($zk) == $WC0 }, 10, 0.3), 'M: no watch left')
	  or diag 'watches: ' . zk_watch_count($zk) . " (before: $WC0)";
	$_->quit foreach @w;
}

#
# N. the worker SIGSTOPped past the session timeout
#
{
	sql("SELECT zk_enqueue('qa_n1', 'n-one')");
	my $sid = zk_status_value($node, 'session_id');
	my $c = new_session($node, name => 'n_cons');
	my $pr = new_session($node, name => 'n_prod');
	my $w = new_session($node, name => 'n_wait');
	$c->query_safe('BEGIN');
	$c->query_safe("INSERT INTO consumed SELECT 'qa_n1', msg_id, body, 30 FROM zk_dequeue('qa_n1', '10s')");
	$w->query_safe('BEGIN');
	$w->send("SELECT body FROM zk_dequeue('qa_n3', '60s')");
	ok(wait_until(sub { sql("SELECT local_waiting FROM zk_queues WHERE queue = 'qa_n3'") eq '1' }, 10),
		'N: a consumer waits on qa_n3');
	my $wpid = worker_pid($node);
	kill 'STOP', $wpid;
	my $t0 = time();
	my $r = $c->query('COMMIT', 20);
	is($r->{sqlstate}, '00000', 'N: the consumer commits while the worker is stopped');
	ok($r->{elapsed} < 3, sprintf('N: without waiting for the worker (%.1fs)', $r->{elapsed}));
	$pr->query_safe('BEGIN');
	$pr->query_safe("SELECT zk_enqueue('qa_n2', 'n2-' || i) FROM generate_series(1, 3) i");
	$r = $pr->query('COMMIT', 30);
	is($r->{sqlstate}, '08006', 'N: an enqueuing COMMIT fails while the worker is stopped') or diag $r->{err};
	ok($r->{elapsed} < 8, sprintf('N: within about zklock.commit_timeout (%.1fs)', $r->{elapsed}));
	my $left = 9 - (time() - $t0);
	sleep $left if $left > 0;
	kill 'CONT', $wpid;
	my $st = wait_for_state($node, sub { $_[0]->{state} eq 'connected' && $_[0]->{session_id} ne $sid }, 30);
	isnt($st->{session_id}, $sid, 'N: the session expired meanwhile (a new session)');
	is(wait_queue('qa_n1', 0, 0, 15), '0/0', "N: the committed consumer's item is consumed in the new session");
	is(sql("SELECT count(*) FROM consumed WHERE q = 'qa_n1'"), '1', 'N: recorded once');
	sleep 2;
	is(n_entries('qa_n2') . '/' . scalar(zk_txns_pending($zk, $TXNS)), '0/0', 'N: the failed COMMIT published nothing, left no txn node');
	qa('put', "$Q/qa_n3", 'n3-item');
	$r = $w->wait(20);
	is($r->{out}, 'n3-item', 'N: the waiter from before the expiry gets the item put afterwards');
	$w->query_safe('COMMIT');
	is(wait_queue('qa_n3', 0, 0), '0/0', 'N: consumed');
	$_->quit foreach ($c, $pr, $w);
}

#
# O. the worker SIGKILLed: crash restart with consumes and publications in
#    flight
#
# $n sessions named $tag1 .. $tagN, each in a transaction that dequeued one
# item of queue $q into table consumed as who $who0 + i (i from 0)
sub claimers
{
	my ($q, $n, $tag, $who0) = @_;
	my @s = map { new_session($node, name => "$tag$_") } 1 .. $n;
	foreach my $i (0 .. $n - 1)
	{
		$s[$i]->query_safe('BEGIN');
		$s[$i]->query_safe("INSERT INTO consumed SELECT '$q', msg_id, body, $who0 + $i FROM zk_dequeue('$q', '10s')");
	}
	return @s;
}

# every $every-th of the claimers @$s (the first too) rolls back, the others
# commit; returns the bodies the rolled-back ones had claimed
sub roll_back_every
{
	my ($s, $every, $who0) = @_;
	my @rolled;
	foreach my $i (0 .. $#$s)
	{
		if ($i % $every == 0)
		{
			push @rolled, $s->[$i]->query_safe("SELECT body FROM consumed WHERE who = " . ($who0 + $i));
			$s->[$i]->query_safe('ROLLBACK');
		}
		else
		{
			$s->[$i]->query_safe('COMMIT');
		}
	}
	return @rolled;
}

sub wait_back
{
	my $ok = wait_until(sub { my $v = eval { $node->safe_psql('postgres', 'SELECT 1') }; defined $v && $v eq '1' }, 60, 0.5);
	wait_for_state($node, 'connected', 60);
	return $ok;
}

{
	my $q = 'qa_o1';
	sql("SELECT zk_enqueue('$q', 'o-' || i) FROM generate_series(1, 10) i");
	my @s = claimers($q, 10, 'o_c', 40);
	is(n_taken($q), 10, 'O: ten claims held');
	my $wpid = worker_pid($node);
	kill 'STOP', $wpid;
	my @rolled = roll_back_every(\@s, 3, 40);
	kill 'KILL', $wpid;
	ok(wait_back(), 'O: the cluster is back after the crash restart');
	is(wait_queue($q, scalar(@rolled), 0, 20), scalar(@rolled) . '/0',
		'O: after the crash, committed claims consumed, rolled-back ones released');
	is(join(',', payloads($q)), join(',', sort @rolled), 'O: the items left are exactly the rolled-back ones');
	is(sql("SELECT count(*) || '/' || count(DISTINCT body) FROM consumed WHERE q = '$q'"), '6/6',
		'O: six consumed, recorded once each');
	$_->kill_client foreach @s;
	sql("SELECT zk_queue_purge('$q')");

	# producers commit while publication hangs, then the worker dies
	$q = 'qa_o2';
	sql("SELECT zk_enqueue('$q', 'warm'); SELECT zk_queue_purge('$q')");
	my $drop = proxy_rule($p, 'drop-requests multi');
	my @pr = map { new_session($node, name => "o_p$_") } 1 .. 4;
	foreach my $i (0 .. 3)
	{
		$pr[$i]->query_safe('BEGIN');
		$pr[$i]->query_safe("SELECT zk_enqueue('$q', 'p$i-' || j) FROM generate_series(1, 5) j");
		$pr[$i]->send('COMMIT');
	}
	my @committed;
	foreach my $i (0 .. 3)
	{
		my $r = $pr[$i]->wait(30);
		push @committed, $i if $r->{sqlstate} eq '00000';
		note "producer $i: $r->{sqlstate} $r->{err}";
	}
	ok(scalar(@committed) >= 1, 'O: at least one producer committed while publication hung (' . scalar(@committed) . ')');
	is(n_entries($q), 0, 'O: nothing published yet');
	kill 'KILL', worker_pid($node);
	proxy_cmd($p, 'reset');
	ok(wait_back(), 'O: back after the crash restart');
	my $want = 5 * scalar(@committed);
	is(wait_queue($q, $want, 0, 20), "$want/0", "O: the committed producers' $want items are published after the crash");
	sleep 1.5;
	is(join(',', payloads($q)), join(',', sort map { my $i = $_; map { "p$i-$_" } 1 .. 5 } @committed),
		'O: exactly their items, once each; none of the failed COMMITs');
	is(scalar(zk_txns_pending($zk, $TXNS)), 0, 'O: no transaction node left');
	$_->kill_client foreach @pr;
	sql("SELECT zk_queue_purge('$q')");
}

#
# Q. the worker terminated while consumers hold claims
#
{
	my $q = 'qa_q1';
	sql("SELECT zk_enqueue('$q', 'q-' || i) FROM generate_series(1, 6) i");
	my @s = claimers($q, 6, 'q_c', 60);
	is(n_taken($q), 6, 'Q: six claims held');
	my $sid = zk_status_value($node, 'session_id');
	my $wpid = worker_pid($node);
	# stopped first, so that the owners let go before a new worker can run
	kill 'STOP', $wpid;
	is(sql("SELECT pg_terminate_backend($wpid)"), 't', 'Q: the worker is told to terminate');
	my @rolled = roll_back_every(\@s, 2, 60);
	kill 'CONT', $wpid;
	my $st = wait_for_state($node,
		sub { $_[0]->{state} eq 'connected' && $_[0]->{worker_pid} != $wpid }, 30);
	isnt($st->{worker_pid}, $wpid, "Q: a new worker runs ($st->{worker_pid}), connected");
	is(wait_queue($q, scalar(@rolled), 0, 20), scalar(@rolled) . '/0',
		'Q: the new worker consumed the committed claims and released the rolled-back ones');
	is(join(',', payloads($q)), join(',', sort @rolled), 'Q: the items left are exactly the rolled-back ones');
	my $used;
	ok(wait_until(sub { $used = zk_status_value($node, 'entries_used'); $used eq '0' }, 10),
		"Q: no shared-memory entry left ($used)");
	my $c = new_session($node, name => 'q_again');
	is($c->query_safe("SELECT count(*) FROM zk_dequeue('$q', '5s', 10)"), scalar(@rolled),
		'Q: the released items can be dequeued again');
	$_->kill_client foreach (@s, $c);
	sql("SELECT zk_queue_purge('$q')");
}

#
# P. requests over jute.maxbuffer that zklock's size checks let through
#
{
	# '~' is percent-encoded: the 250-byte name is 750 bytes in every path
	my $name = '~' x 250;
	my $enc = '%7E' x 250;
	foreach (1 .. 2)
	{
		sql("SELECT count(zk_enqueue('$name', 'x')) FROM generate_series(1, 350)");
	}
	is(n_entries($enc), 700, 'P1: 700 items in the queue with the long encoded name');
	my $c = new_session($node, name => 'p_cons');
	$c->query_safe('BEGIN');
	is($c->query_safe("SELECT count(*) FROM zk_try_dequeue('$name', 700)"), '700', 'P1: one dequeue claims all 700');
	$c->query_safe('COMMIT');
	is(wait_queue($enc, 0, 0, 20), '0/0',
		'P1: COMMIT consumes the 700 (the consume request must fit in one ZooKeeper packet or be split)');
	is(zk_status_value($node, 'state'), 'connected', 'P1: the worker is connected');
	qa('rmtree', "$Q/$enc");    # stops a retry loop, if any
	$c->quit;

	my $s = new_session($node, name => 'p_prod');
	$s->query_safe('BEGIN');
	my $r = $s->query("SELECT count(zk_enqueue('$name', repeat('y', 300))) FROM generate_series(1, 1024)");
	if ($r->{sqlstate} eq '00000')
	{
		$r = $s->query('COMMIT', 30);
		note "P2: COMMIT: $r->{sqlstate} $r->{err}";
		if ($r->{sqlstate} eq '00000')
		{
			is(wait_queue($enc, 1024, 0, 20), '1024/0', 'P2: a COMMIT that succeeded published its 1024 items');
			unlike($r->{err}, qr/not yet visible/, 'P2: without "committed but not yet visible"');
		}
		else
		{
			is(n_entries($enc), 0, 'P2: a failed COMMIT published nothing');
		}
	}
	else
	{
		is($r->{sqlstate}, '54000', 'P2: refused at enqueue with 54000');
		$s->query('ROLLBACK');
	}
	$s->quit;
	# stop a publication retry loop, if any: drop the txn nodes, restart
	qa('rmtree', $TXNS);
	$node->restart;
	wait_for_state($node, 'connected', 60);

	$s = new_session($node, name => 'p_prod2');
	$s->query_safe('BEGIN');
	$r = $s->query("SELECT count(zk_enqueue('p' || chr(97 + i % 13), ''::bytea)) FROM generate_series(1, 13000) i", 60);
	if ($r->{sqlstate} eq '00000')
	{
		$r = $s->query('COMMIT', 30);
		note "P3: COMMIT: $r->{sqlstate} $r->{err}";
		my $want = $r->{sqlstate} eq '00000' ? 1000 : 0;
		ok(wait_until(sub { n_entries('pa') == $want && n_entries('pm') == $want }, 20, 0.5),
			"P3: 13000 empty items in 13 queues: $want in each (all published, or the COMMIT failed)")
		  or diag 'pa: ' . n_entries('pa') . ', commit: ' . $r->{sqlstate};
		unlike($r->{err}, qr/not yet visible/, 'P3: no "committed but not yet visible"');
	}
	else
	{
		is($r->{sqlstate}, '54000', 'P3: refused at enqueue with 54000');
	}
	$s->quit;
}

#
# S. a long queue
#
{
	my $q = 'long';
	my $qp = "$Q/$q";
	is(qa('fill', $qp, 600), '600', 'S: kazoo put 600 items');
	my @names = entry_names($q);
	my $s = new_session($node, name => 's_long');
	my $deq = sub { return $s->query_safe("SELECT body FROM zk_try_dequeue('$q')"); };
	my $l0 = listings();
	my @got = map { $deq->() } 1 .. 100;
	is_deeply(\@got, [ map { "item-$_" } 0 .. 99 ], 'S: 100 items dequeued one by one, in FIFO order');
	my $nl = listings() - $l0;
	ok($nl < 25, "S: $nl listings for 100 dequeues from a queue of 600");
	qa('put', $qp, 'urgent', 0);
	is($deq->(), 'urgent', 'S: a kazoo item of priority 0 put meanwhile is the next');
	is($deq->(), 'item-100', 'S: then the queue goes on in order');
	qa('rmtree', "$qp/entries/$names[101]");
	qa('rmtree', "$qp/entries/$names[103]");
	is($deq->(), 'item-102', 'S: the next item, consumed by another client, is skipped');
	is($deq->(), 'item-104', 'S: and the one after the next too');
	$s->query_safe('BEGIN');
	is($s->query_safe("SELECT body FROM zk_try_dequeue('$q')"), 'item-105', 'S: dequeued in a transaction');
	$s->query_safe('ROLLBACK');
	is($deq->(), 'item-105', 'S: rolled back, it is the next again');
	$s->query_safe("SELECT zk_enqueue('$q', 'own', 0)");
	is($deq->(), 'own', 'S: an item of priority 0 published here is the next');
	@got = split /\n/, $s->query_safe("SELECT string_agg(body, E'\\n') FROM zk_try_dequeue('$q', 1000)");
	is_deeply(\@got, [ map { "item-$_" } 106 .. 599 ], 'S: the rest in order, in one dequeue');
	is($deq->(), '', 'S: then the queue is empty');
	is(qa('nchildren', "$qp/entries"), 0, 'S: nothing left in entries');
	is(qa('nchildren', "$qp/taken"), 0, 'S: no claim left');
	$s->quit;
}

#
# R. a large queue
#
{
	my $qp = "$Q/big";
	is(qa('fill', $qp, 20000), '20000', 'R: kazoo put 20000 items');
	my $s = new_session($node, name => 'r_big');
	$s->query_safe("SET zklock.connect_timeout = '1s'");
	is($s->query_safe("SELECT zk_queue_length('big')"), '20000', 'R: zk_queue_length counts 20000');
	my $t = time();
	my $r = $s->query("SELECT count(*), min(body), count(DISTINCT msg_id) FROM zk_queue_peek('big', 100000)", 120);
	is($r->{sqlstate}, '00000', 'R: a peek of every item with connect_timeout 1s') or diag $r->{err};
	is($r->{out}, '20000|item-0|20000', 'R: the peek shows each of the 20000 items once, the first first');
	note sprintf('R: peek of 20000 items took %.1fs', time() - $t);

	# cancelled halfway: stops deleting, no claim left, counts add up
	$s->query_safe("SET statement_timeout = '300ms'");
	$r = $s->query("SELECT zk_queue_purge('big')", 60);
	is($r->{sqlstate}, '57014', 'R: a purge cut by statement_timeout fails with 57014') or diag $r->{err};
	$s->query_safe('RESET statement_timeout');
	ok(wait_until(sub { qa('nchildren', "$qp/taken") == 0 }, 20, 0.5),
		'R: the cancelled purge left no claim');
	my $left = qa('nchildren', "$qp/entries");
	sleep 1;
	is(qa('nchildren', "$qp/entries"), $left, "R: and deletes no more after the cancel ($left left)");
	ok($left > 0 && $left < 20000, "R: it had deleted some but not all ($left left)");

	# the rest: longer than connect_timeout; a lock meanwhile
	my $purger = new_session($node, name => 'r_purger');
	$purger->query_safe("SET zklock.connect_timeout = '1s'");
	$t = time();
	$purger->send("SELECT zk_queue_purge('big')");
	usleep(200_000);
	my $l = one_shot($node, "SET zklock.connect_timeout = '3s'; BEGIN; SELECT zk_lock('r_during') IS NOT NULL; COMMIT", 30);
	is($l->{sqlstate}, '00000', 'R: a lock during the purge is granted') or diag $l->{err};
	note sprintf('R: the lock took %.2fs', $l->{elapsed});
	$r = $purger->wait(120);
	is($r->{sqlstate}, '00000', 'R: the purge of the rest completes with connect_timeout 1s') or diag $r->{err};
	is($r->{out}, $left, "R: it reports the $left items it deleted");
	note sprintf('R: purge of %d items took %.1fs', $left, time() - $t);
	is(qa('nchildren', "$qp/entries"), 0, 'R: the queue is empty in ZooKeeper');
	is(qa('nchildren', "$qp/taken"), 0, 'R: no claim left');
	$purger->quit;
	$s->quit;
}

done_testing();
