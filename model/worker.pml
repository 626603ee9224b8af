/*
 * worker.pml: snowflake worker claim + time lease + fencing (invariant I2,
 * docs/protocol.md), on the JetStream KV registry.
 *
 * Mirrors:
 *   snowflake/kvworker/kvworker.go Registry.Register (claim key w<N>: Create
 *                                 with a per-key TTL), Registry.fence (owner
 *                                 token into lease key t<N> by compare-and-
 *                                 swap; a delete marker refuses the id),
 *                                 Registry.Lease (raise t<N> only while it
 *                                 carries this registration's token),
 *                                 Registry.refresh (claim key TTL), Open
 *                                 (Fresh: the bucket has no message at all)
 *   snowflake/source.go           Source.register (LastLease raised to the
 *                                 Source's own floor and to PeerLease; no
 *                                 lease on record: wait ClaimTTL+LeaseAhead,
 *                                 BorrowAhead, or nothing when Fresh and no
 *                                 live node holds it), Source.renew (the
 *                                 fence: start of the last confirmed Lease +
 *                                 ClaimTTL), Source.Fill (lapsed check, then
 *                                 ids up to min(leased, now+BorrowAhead)),
 *                                 Source.relost / lapse (Past leases)
 *   snowflake/leasefile.go        LeaseFiles: every Lease is on disk before it
 *                                 is sent; Register reports the higher one
 *   node/snowflake.go             Node.noPeerServes (SourceConfig.NewWorker)
 *   peers/status.go               Set.Lease (SourceConfig.PeerLease)
 *
 * What it abstracts: one worker id that N nodes compete for (the registry
 * hands out only that one); time is a global tick counter 0..TMAX (every
 * node's clock and monotonic clock read it: the time lease and the ids are
 * compared in one clock frame, which is what makes skew irrelevant to the
 * lease path); an id is (worker, tick). A Fill makes every tick its limit
 * allows at once (a superset of any smaller Fill), and I2 is checked as:
 * the ticks of two registrations (tokens) never interleave. Every id made
 * counts as handed out (the ring's drop on a lost claim is not modelled:
 * the model is the stronger for it). The members protocol is what it
 * guarantees: a node whose key in leaf_nodes is fresh (age < MTTL; any
 * answer from NATS renews it) is heard by the live-node questions (Holder,
 * NewWorker, PeerLease); one that died without a goodbye is waited for
 * until its key is MTTL old (the registration fails and is tried again);
 * then it is passed over. A Lease answer after renew's timeout (LeaseAhead/2)
 * is an error. Faults: crash (kill -9: process memory lost, the lease files
 * kept) and a restart, freeze (a process not scheduled while the clock
 * runs), a Lease delayed (sent, applied by the store later, answered later
 * still), lost, or its answer lost, the claim key's refresh not done, and
 * the operator deleting the claim key or the lease key (MAXOPS), or the
 * whole bucket (OP_WIPE: not in make model, see docs/protocol.md).
 *
 * Planted bugs (scripts/model.sh expects a counterexample for each):
 *   BUG_NO_FENCE  Lease does not check the owner token (no fencing)
 *   BUG_NO_WAIT   the generator ignores LastLease (no wait past the lease)
 * A check that protects nothing the model can tell (expected: errors 0):
 *   NO_CLAIM_TTL  Source.lapsed removed (the ClaimTTL fence)
 * Also here: BUG_NO_PEERLEASE (PeerLease not asked), meaningful with OP_WIPE.
 */

#ifndef N
#define N 2
#endif
#ifndef TMAX
#define TMAX 6
#endif
#define TTL 2      /* ClaimTTL */
#define LA 2       /* LeaseAhead */
#define BA 1       /* BorrowAhead = LeaseAhead/2 */
#define MTTL 2     /* memberTTL: a silent member is passed over once its key is this old */
#ifndef MAXTOK
#define MAXTOK 4   /* registrations in all (each Register takes a new token) */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXOPS
#define MAXOPS 1
#endif

#define LOST  0
#define WAIT  1
#define SERVE 2

#define max(a, b) ((a) > (b) -> (a) : (b))
#define min(a, b) ((a) < (b) -> (a) : (b))

byte now;

/* the registry (KV bucket leaf_workers) */
byte cOwner;        /* claim key w0: token holding it, 0 none */
byte cExp;          /* the claim key's TTL ends here */
byte lOwner;        /* lease key t0: owner token */
byte lVal;          /* lease key t0: the time lease */
bit  lGone;         /* lease key t0 is a delete marker (an operator) */
bit  written;       /* the bucket has a message (not Fresh) */

/* nodes */
byte st[N];
byte tok[N];        /* current registration, 0 none */
bit  dead[N];       /* registration dropped (relost, lapse) */
bit  regLost[N];    /* the registry closed Lost */
byte fence[N];      /* no id at or after this tick (ClaimTTL after a confirmed start) */
byte leased[N];     /* confirmed time lease */
byte glast[N];      /* the generator's last tick used (LastIssued at start) */
byte past[N];       /* Source.Past: leases of registrations it lost (process memory) */
byte disk[N];       /* LeaseFiles: the highest lease this node ever sent (survives a crash) */
byte dpast[N];      /* the lease files as read at the last start (status: Past of ids not held) */
bit  up[N];         /* the process runs (crashed: not until it restarts) */
byte age[N];        /* age of its key in leaf_nodes, capped at MTTL (any answer from NATS renews it) */

/* one Lease in flight per node (Registry.Lease holds leaseMu) */
byte mPhase[N];     /* 0 none, 1 sent, 2 ok, 3 fenced, 4 lost/timeout */
byte mTok[N];
byte mSent[N];

byte tokens;        /* tokens handed out */
byte crashes;
byte ops;

/* the first and last tick each registration (token) used, 0 none */
byte lo[MAXTOK + 1];
byte hi[MAXTOK + 1];

/* Fill makes every id the limit allows at once: the ticks a registration
 * uses are then a superset of those of any Fill that made fewer, in the
 * same schedule, so a duplicate of any run shows here too. I2 is checked
 * in a stronger form: the ticks of two registrations never interleave (lo
 * and hi: the first and last tick each registration used). */
inline fill(i) {
	t = max(glast[i] + 1, now);
	if
	:: t <= min(leased[i], now + BA) ->
		if :: lo[tok[i]] == 0 -> lo[tok[i]] = t :: else fi;
		glast[i] = min(leased[i], now + BA);
		hi[tok[i]] = glast[i];
		for (j : 1 .. MAXTOK) {
			assert(j == tok[i] || hi[j] == 0 || hi[j] < lo[tok[i]] || lo[j] > hi[tok[i]])   /* I2 */
		}
	:: else
	fi;
	t = 0; j = 0
}

/* The live-node checks (peers.Set.gather) hear node j: it is up
 * and its members key is fresh. A member that is silent is waited for (the
 * check is tried again), so what it would answer counts; once its key is
 * MTTL old it is passed over. */
#define heard(j) (up[j] && age[j] < MTTL)
/* a member that died without a goodbye: its key is waited for until it is
 * MTTL old, so a check fails (ErrPeersSilent) and the registration is
 * tried again */
#define silent(j) (!up[j] && age[j] < MTTL)

/* the ClaimTTL fence (Source.lapsed); NO_CLAIM_TTL removes it */
#ifdef NO_CLAIM_TTL
#define LAPSED(i) false
#else
#define LAPSED(i) (now >= fence[i])
#endif

/* relost / lapse: drop the registration, remember its lease (Past) */
inline drop(i) {
	past[i] = max(past[i], leased[i]);
	clear(i)
}

/* a registration gone: forget what only it used (dead values would only
 * multiply the states) */
inline clear(i) {
	st[i] = LOST; tok[i] = 0; dead[i] = 1; regLost[i] = 0;
	fence[i] = 0; leased[i] = 0; glast[i] = 0
}

inline answered(i) {
	mPhase[i] = 0; mTok[i] = 0; mSent[i] = 0
}

proctype Clock() {
	byte k;
end:	do
	:: d_step { now < TMAX -> now++;
		for (k : 0 .. N - 1) { if :: age[k] < MTTL -> age[k]++ :: else fi }; k = 0 }
	od
}

/* The network and the store: applies each Lease in flight at any later
 * moment, or loses it (request lost or timed out). */
proctype Net() {
	byte i;
end:	do
	:: atomic {
		select(i : 0 .. N - 1);
		mPhase[i] == 1 ->
		if
		:: lGone -> mPhase[i] = 3         /* "the lease key was deleted: claim lost" */
#ifndef BUG_NO_FENCE
		:: !lGone && lOwner != mTok[i] -> mPhase[i] = 3   /* errFenced */
		:: !lGone && lOwner == mTok[i] ->
#else
		:: !lGone ->
			lOwner = mTok[i];
#endif
			lVal = max(lVal, mSent[i] + LA);
			written = 1;
			mPhase[i] = 2
		:: mPhase[i] = 4                   /* lost on the way */
		fi;
		i = 0
	   }
	od
}

proctype Operator() {
end:	do
	:: atomic { ops < MAXOPS -> ops++; cOwner = 0 }          /* nats kv del leaf_workers w0 */
	:: atomic { ops < MAXOPS -> ops++; lGone = 1 }           /* nats kv del leaf_workers t0 */
#ifdef OP_WIPE
	:: atomic { ops < MAXOPS -> ops++;                       /* the whole bucket deleted, made again */
		cOwner = 0; lOwner = 0; lVal = 0; lGone = 0; written = 0 }
#endif
	od
}

bit fresh[N];       /* the bucket had no message when this registration opened it */

/* scratch, used within one d_step only: not part of the state */
hidden byte last, t, j, wait, nobody;


/* Source.register, second half: the fence (compare-and-swap of t0, time
 * may have passed since the claim), Holder, then LastLease from the lease,
 * this host's lease files, the Source's own floor, the live nodes' past
 * leases, and the wait when none is on record. tok[i] = 0: refused. */
inline register(i) {
	d_step {
	if
	:: lGone ->                          /* errLeaseDeleted: the id is not used */
		if :: cOwner == tok[i] -> cOwner = 0 :: else fi;
		clear(i)
	:: else ->
		lOwner = tok[i]; last = lVal; written = 1;
		/* Holder: a live node that says it holds the id refuses it; a
		 * member that does not answer fails the question */
		for (j : 0 .. N - 1) {
			if
			:: j != i && heard(j) && st[j] != LOST && !dead[j] -> tok[i] = 0
			:: j != i && silent(j) -> tok[i] = 0
			:: else
			fi
		}
		if :: tok[i] == 0 -> if :: cOwner == lOwner -> cOwner = 0 :: else fi; clear(i) :: else fi
	fi;
	if
	:: tok[i] != 0 ->
		/* LeaseFiles: this host's own copy of its leases */
		last = max(last, disk[i]);
		/* the Source's own floor of the worker (Past) */
		last = max(last, past[i]);
#ifndef BUG_NO_PEERLEASE
		/* PeerLease: past leases the live nodes report */
		for (j : 0 .. N - 1) {
			if
			:: j != i && heard(j) -> last = max(last, past[j]); last = max(last, dpast[j])
			:: else
			fi
		}
#endif
		/* no lease on record: wait out a holder (NewWorker asks the live nodes) */
		if
		:: last == 0 ->
			nobody = 1;
			for (j : 0 .. N - 1) {
				if
				:: j != i && heard(j) && st[j] != LOST && !dead[j] -> nobody = 0
				:: else
				fi
			}
			if
			:: !nobody -> wait = TTL + LA
			:: nobody && !fresh[i] -> wait = BA
			:: else -> wait = 0             /* Fresh, and no live holder */
			fi;
			last = now + wait
		:: else
		fi;
#ifdef BUG_NO_WAIT
		last = 0;
#endif
		glast[i] = last;                 /* the generator's LastIssued */
		leased[i] = last;
		st[i] = WAIT
	:: else
	fi;
	fresh[i] = 0;
	last = 0; j = 0; wait = 0; nobody = 0
	}
}

proctype Node(byte i) {
	up[i] = 1;
end:	do
	/* Source.register, first half (kvworker.Registry.Register: Create of w0 with a TTL) */
	:: atomic { up[i] && st[i] == LOST && tokens < MAXTOK && mPhase[i] == 0 ->
		tokens++; tok[i] = tokens; dead[i] = 0; fresh[i] = !written; age[i] = 0;
		if
		:: cOwner == 0 || now >= cExp -> cOwner = tok[i]; cExp = now + TTL; written = 1;
			fence[i] = now + TTL       /* start of Register + ClaimTTL */
		:: else -> clear(i); fresh[i] = 0   /* held by another node: try later */
		fi }
		if
		:: tok[i] != 0 -> register(i)
		:: else
		fi
	/* the run loop: resume once the clock is past the last lease */
	:: atomic { up[i] && st[i] == WAIT && now >= glast[i] -> st[i] = SERVE }
	/* Source.renew: a Lease (on disk first, LeaseFiles), when it raises the
	 * lease or half the fence is used up */
	:: atomic { up[i] && st[i] != LOST && !dead[i] && mPhase[i] == 0 &&
		(now + LA > leased[i] || fence[i] <= now + TTL / 2) ->
		if
		:: LAPSED(i) -> drop(i)            /* lapsed before the call */
		:: else ->
			mTok[i] = tok[i]; mSent[i] = now;
			disk[i] = max(disk[i], now + LA);
			mPhase[i] = 1
		fi }
	/* the Lease's answer; the reply may be lost (dropped here) */
	:: atomic { up[i] && mPhase[i] == 2 ->
		age[i] = 0;
		if
		:: mTok[i] == tok[i] && !dead[i] && now <= mSent[i] + LA / 2 ->   /* within renew's timeout */
			fence[i] = max(fence[i], mSent[i] + TTL);
			leased[i] = max(leased[i], mSent[i] + LA)
		:: true                            /* reply lost, or of an old registration */
		fi;
		answered(i) }
	:: atomic { up[i] && mPhase[i] == 3 ->
		age[i] = 0;
		if
		:: mTok[i] == tok[i] && !dead[i] -> regLost[i] = 1   /* fenced: Lost closed */
		:: else
		fi;
		answered(i) }
	:: atomic { up[i] && mPhase[i] == 4 -> answered(i) }
	/* the claim key's refresher: renews its TTL, or finds it gone */
	:: atomic { up[i] && st[i] != LOST && !regLost[i] && tok[i] != 0 ->
		if
		:: cOwner == tok[i] && now < cExp && cExp <= now + TTL / 2 -> cExp = now + TTL; age[i] = 0   /* due */
		:: !(cOwner == tok[i] && now < cExp) -> regLost[i] = 1   /* conflict: expired and taken, or purged */
		fi }
	/* the run loop sees Lost, or the fence passed */
	:: atomic { up[i] && st[i] != LOST && !dead[i] && (regLost[i] || LAPSED(i)) -> drop(i) }
	/* Source.Fill: the lapsed check, then (perhaps after a freeze) the ids */
	:: up[i] && st[i] == SERVE && !dead[i] ->
		if
		:: LAPSED(i) -> atomic { drop(i) }
		:: else ->
			d_step { fill(i) }
		fi
	/* kill -9, and a restart on the same data directory */
	:: atomic { up[i] && crashes < MAXCRASH -> crashes++;
		up[i] = 0; clear(i); past[i] = 0 }
	:: atomic { !up[i] -> up[i] = 1; dpast[i] = disk[i]; age[i] = 0 }
	od
}

init {
	byte i;
	atomic {
		run Clock();
		run Net();
		run Operator();
		for (i : 0 .. N - 1) {
			run Node(i)
		}
	}
}
