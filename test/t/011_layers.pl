
# 011_layers.pl - tools/layers.py, the check that the code's layers only
# point down (src/README, "Layers").
#
# 1. The built tree passes: no circle between src/'s folders, the base
#    (src/core) names no recipe, every folder that declares a stack keeps it.
# 2. It can fail: small trees compiled here, each with one offence, are each
#    refused, naming it -- the base calling a recipe's function, including a
#    recipe's header, naming a recipe's kind in code (in a comment it may),
#    two recipes calling each other, a file calling up its folder's stack, a
#    file its folder's stack does not place -- and a clean one passes, with a
#    knot in parentheses allowed to call itself.

use strict;
use warnings FATAL => 'all';

use File::Path qw(make_path);
use File::Temp qw(tempdir);
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $SRC = $ZkLockTest::SRC;
my $PY = $ZkLockTest::PYTHON;

sub run_cmd
{
	my @cmd = @_;
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return ($? >> 8, $out . $err);
}

# ---- 1. the tree as built ----
my ($rc, $out) = run_cmd($PY, "$SRC/tools/layers.py");
is($rc, 0, 'the built tree keeps its layers') or diag($out);
like($out, qr/no circle between them, the base names no recipe, [1-9]\d* stacks kept/,
	'it says what it checked');

# ---- 2. trees with one offence each ----

# a tree under a fresh directory: files => text; compiles every .c there
sub tree
{
	my (%files) = @_;
	my $dir = tempdir(CLEANUP => 1);
	my %all = (
		'recipelist.h' => "ZK_RECIPE(lock)\nZK_KIND(ZKK_LOCK, zk_lock_ops, \"lock\")\n"
		  . "ZK_RECIPE(queue)\nZK_KIND(ZKK_QPUB, zk_qpub_ops, \"publication\")\n",
		'core/base.h' => "#define ZK_RECIPE(id)\n#define ZK_KIND(k, o, l) k,\n"
		  . "enum {\n#include \"recipelist.h\"\n};\nint zk_core_f(void);\n",
		'core/base.c' => "#include \"base.h\"\nint zk_core_f(void) { return 1; }\n",
		'lock/lock.h' => "int zk_lock_f(void);\n",
		'lock/lock_a.c' => "#include \"base.h\"\nint zk_lock_f(void) { return zk_core_f(); }\n"
		  . "const int zk_lock_recipe = 1;\nconst int zk_lock_ops = 2;\n",
		'queue/queue_a.c' => "#include \"base.h\"\nint zk_queue_f(void) { return zk_core_f(); }\n"
		  . "const int zk_queue_recipe = 1;\nconst int zk_qpub_ops = 2;\n",
		%files);
	foreach my $f (sort keys %all)
	{
		my $path = "$dir/src/$f";
		(my $d = $path) =~ s{/[^/]+$}{};
		make_path($d);
		next unless defined $all{$f};
		open(my $fh, '>', $path) or die "$path: $!";
		print $fh $all{$f};
		close($fh);
	}
	foreach my $f (sort keys %all)
	{
		next unless defined $all{$f} && $f =~ /\.c$/;
		(my $o = "$dir/src/$f") =~ s/\.c$/.o/;
		my ($crc, $cout) = run_cmd('cc', '-c', "-I$dir/src", "-I$dir/src/core",
			'-o', $o, "$dir/src/$f");
		die "cc $f: $cout" if $crc != 0;
	}
	return $dir;
}

sub check
{
	my ($dir) = @_;
	return run_cmd($PY, "$SRC/tools/layers.py", '--src', "$dir/src");
}

my @bad = (
	[ 'the base calls a recipe',
		{ 'core/up.c' => "int zk_lock_f(void);\nint zk_up(void) { return zk_lock_f(); }\n" },
		qr/the base calls up: core\/up\.c uses zk_lock_f \(lock\/lock_a\.c\)/ ],
	[ 'the base includes a recipe header',
		{ 'core/inc.c' => "#include \"lock/lock.h\"\nint zk_inc(void) { return 0; }\n" },
		qr/the base includes a recipe header: core\/inc\.c includes lock\/lock\.h/ ],
	[ 'the base names a recipe kind in code',
		{ 'core/kind.c' => "#include \"base.h\"\n/* ZKK_QPUB in a comment is fine */\n"
			  . "int zk_kind(int k) { return k == ZKK_LOCK; }\n" },
		qr/the base names a recipe symbol: core\/kind\.c names ZKK_LOCK/ ],
	[ 'two recipes call each other',
		{ 'lock/lock_b.c' => "int zk_queue_f(void);\nint zk_lock_g(void) { return zk_queue_f(); }\n",
		  'queue/queue_b.c' => "int zk_lock_f(void);\nint zk_queue_g(void) { return zk_lock_f(); }\n" },
		qr/a circle between folders: lock -> queue -> lock/ ],
	[ 'a file calls up its stack',
		{ 'lock/README' => "Stack:\tlock_a.c lock_b.c\n",
		  'lock/lock_b.c' => "int zk_lock_h(void) { return 2; }\n",
		  'lock/lock_a.c' => "#include \"base.h\"\nint zk_lock_h(void);\n"
			  . "int zk_lock_f(void) { return zk_core_f() + zk_lock_h(); }\n"
			  . "const int zk_lock_recipe = 1;\nconst int zk_lock_ops = 2;\n" },
		qr/lock calls up its stack: lock_a\.c uses zk_lock_h \(lock_b\.c\)/ ],
	[ 'a stack leaves a file out',
		{ 'lock/README' => "Stack:\tlock_a.c\n",
		  'lock/lock_b.c' => "int zk_lock_h(void) { return 2; }\n" },
		qr{src/lock/README: Stack: does not place lock_b\.c} ],
);
foreach my $case (@bad)
{
	my ($what, $files, $want) = @$case;
	my ($crc, $cout) = check(tree(%$files));
	is($crc, 1, "refused: $what");
	like($cout, $want, "named: $what");
}

# a clean tree passes, a knot in parentheses may call itself, a comment
# may name a recipe's kind
my $dir = tree(
	'core/kind.c' => "/* ZKK_LOCK is named here in a comment only */\nint zk_kind(void) { return 0; }\n",
	'lock/README' => "Stack:\t( lock_a.c lock_b.c )\n\tlock_c.c\n",
	'lock/lock_b.c' => "int zk_lock_f(void);\nint zk_lock_h(void) { return zk_lock_f(); }\n",
	'lock/lock_c.c' => "int zk_lock_h(void);\nint zk_lock_top(void) { return zk_lock_h(); }\n",
	'lock/lock_a.c' => "#include \"base.h\"\nint zk_lock_h(void);\n"
	  . "int zk_lock_f(void) { return zk_core_f(); }\nint zk_lock_g(void) { return zk_lock_h(); }\n"
	  . "const int zk_lock_recipe = 1;\nconst int zk_lock_ops = 2;\n",
	'queue/queue_b.c' => "int zk_lock_f(void);\nint zk_queue_g(void) { return zk_lock_f(); }\n");
($rc, $out) = check($dir);
is($rc, 0, 'a clean tree passes (a knot, a comment, a recipe on another)') or diag($out);
like($out, qr/1 stacks kept/, 'its one stack is counted');

done_testing();
