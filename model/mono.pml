/*
 * mono.pml: the monotonic leader lease (invariant I3, docs/protocol.md):
 * a monotonic tag has at most one serving leader, and each leader starts
 * above every earlier one, so ids handed out one after another increase.
 *
 * Mirrors:
 *   mono/leader.go        Leader.Run (Acquire, renewals every Renew, step
 *                         down on ErrLost or when TTL-Margin passed since the
 *                         last confirmed renewal; Release on stop),
 *                         Leader.lead (fence = sent+TTL-Margin, from =
 *                         sent+Grant.Wait, ranges dropped, a fresh load),
 *                         Leader.leadingLocked (serve only while from <= now
 *                         < fence), Leader.loadLocked (a range is kept only
 *                         if its generation is the grant's, the Leader still
 *                         leads, and it began at or after from), Leader.Next,
 *                         Leader.stepDown
 *   mono/kvlease/kvlease.go  Lease.Acquire (held while the key's last
 *                         message is a record; a Release's own marker: no
 *                         wait; any other marker (the server's TTL, an
 *                         operator's delete): wait until a TTL after the
 *                         last record was seen; the create is conditional on
 *                         the message read), Lease.Renew and Lease.Release
 *                         (conditional on the grant's revision)
 *   mono/server.go        reserver (a segment.Reserver: a fresh range
 *                         from the store, above the floors)
 *
 * What it abstracts: one tag, N nodes; a global tick counter stands for
 * every node's monotonic clock (Margin covers clock rates, so one tick of
 * margin is kept); the lease is the KV key with its server-side TTL (a
 * record expires TTL after it was written: the Clock writes the marker);
 * the watch that tells a follower when it saw the last record sees it at
 * once (the earliest, so the shortest wait: the worst case); a leader holds
 * one range at a time (the second buffer of Leader only ever holds a range
 * reserved later, so above); the segment store's max_id only goes up (the
 * floors that keep it so are segment.pml's). Faults: crash (the lease stays
 * until its TTL), freeze (a process not scheduled), delayed, lost and
 * unanswered requests (Acquire, Renew, Release, the range reservation), and
 * the operator deleting the lease key.
 *
 * The property: every id taken (under Leader.mu) is larger than every id
 * taken before it, by any leader — stronger than linearizability, which
 * needs it only for a reply seen before the next request was sent.
 *
 * Planted bugs (scripts/model.sh expects a counterexample for each):
 *   BUG_NO_FENCE  a leader serves while it holds a grant, past its fence
 *   BUG_NO_WAIT   Grant.Wait is ignored (from = sent)
 *   BUG_NO_GEN    a range reserved under an earlier grant is kept
 * A check that protects nothing the model can tell (expected: errors 0):
 *   NO_BEGAN_CHECK  the "began < from" test of loadLocked removed
 */

#ifndef N
#define N 2
#endif
#ifndef TMAX
#define TMAX 6
#endif
#define TTL 3
#define MARGIN 1
#define STEP 2
#ifndef MAXID
#define MAXID 9    /* ids 1..MAXID-1: the bound of the model, not of the tag */
#endif
#ifndef MAXG
#define MAXG 3     /* grants in all */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#ifndef MAXOPS
#define MAXOPS 1
#endif

#define max(a, b) ((a) > (b) -> (a) : (b))

byte now;

/* the lease key */
byte kGid;          /* the grant whose record is the key's last message; 0: a marker */
byte kRecv;         /* when the last record was written */
bit  kRel;          /* the last message is its holder's Release */
byte kSeq;          /* messages written (the compare-and-swap's revision) */

byte maxid = 1;     /* the tag's max_id in the segment store */
byte lastTaken;     /* the highest id taken so far, by any leader */

byte grants;
byte crashes;
byte ops;

/* leaders */
byte gid[N];        /* the grant this node leads under; 0 none */
byte gen[N];        /* bumped at every acquire and every step down (mod 4) */
byte fence[N];      /* serve while now < fence ... */
byte from[N];       /* ... and now >= from */
byte cn[N];         /* the range held: [cn, ce) */
byte ce[N];
/* Acquire in flight */
byte aPh[N];        /* 0 none, 1 read done, 2 granted, 3 held/failed */
byte aEntry[N];
byte aSeq[N];       /* the message the decision was made on; once granted, the grant */
byte aWait[N];
/* Renew in flight */
byte rPh[N];        /* 0 none, 1 sent, 2 ok, 3 lost, 4 no answer */
byte rSent[N];
/* a range reservation in flight */
byte lPh[N];        /* 0 none, 1 sent, 2 answered, 3 failed */
byte lGen[N];
byte lBegan[N];
byte lStart[N];

#define leading(i) (gid[i] != 0 && now >= from[i] && LIVE(i))
#ifdef BUG_NO_FENCE
#define LIVE(i) true
#else
#define LIVE(i) (now < fence[i])
#endif

#ifdef BUG_NO_GEN
#define SAMEGEN(i) true
#else
#define SAMEGEN(i) (lGen[i] == gen[i])
#endif
#ifdef NO_BEGAN_CHECK
#define BEGAN(i) true
#else
#define BEGAN(i) (lBegan[i] >= from[i])
#endif

inline stepDown(i) {
	gid[i] = 0; gen[i] = (gen[i] + 1) % 4; fence[i] = 0; from[i] = 0;
	cn[i] = 0; ce[i] = 0
}

proctype Clock() {
end:	do
	:: d_step { now < TMAX -> now++;
		/* the server's TTL marker */
		if
		:: kGid != 0 && now >= kRecv + TTL -> kGid = 0; kRel = 0; kSeq++
		:: else
		fi }
	od
}

proctype Operator() {
end:	do
	:: d_step { ops < MAXOPS && kGid != 0 -> ops++; kGid = 0; kRel = 0; kSeq++ }   /* nats kv del leaf_mono TAG */
	od
}

/* the Acquire's conditional create reaches the store */
inline acq(i) {
	if
	:: kSeq == aSeq[i] && grants < MAXG -> grants++; kGid = grants; kRecv = now; kRel = 0; kSeq++;
		aSeq[i] = kGid; aPh[i] = 2
	:: else -> aPh[i] = 3
	fi
}

/* a Renew reaches the store */
inline ren(i) {
	if
	:: kGid != 0 && kGid == gid[i] -> kRecv = now; kSeq++; rPh[i] = 2
	:: else -> rPh[i] = 3
	fi
}

proctype Net() {
end:	do
	:: d_step { aPh[0] == 1 -> acq(0) }
	:: d_step { aPh[1] == 1 -> acq(1) }
	:: d_step { rPh[0] == 1 -> ren(0) }
	:: d_step { rPh[1] == 1 -> ren(1) }
	:: d_step { rPh[0] == 1 -> rPh[0] = 4 }    /* lost */
	:: d_step { rPh[1] == 1 -> rPh[1] = 4 }
	/* a range reservation reaches the store (its answer may yet be lost) */
	:: d_step { lPh[0] == 1 && maxid + STEP <= MAXID -> lStart[0] = maxid; maxid = maxid + STEP; lPh[0] = 2 }
	:: d_step { lPh[1] == 1 && maxid + STEP <= MAXID -> lStart[1] = maxid; maxid = maxid + STEP; lPh[1] = 2 }
	:: d_step { lPh[0] == 1 -> lPh[0] = 3 }
	:: d_step { lPh[1] == 1 -> lPh[1] = 3 }
	od
}

proctype Leader(byte i) {
end:	do
	/* Acquire: read the key; held while its last message is a record */
	:: d_step { gid[i] == 0 && aPh[i] == 0 && rPh[i] == 0 && grants < MAXG && kGid == 0 ->
		aEntry[i] = now; aSeq[i] = kSeq;
		if
		:: kRel -> aWait[i] = 0                       /* released by its holder */
		:: !kRel && kRecv + TTL > now -> aWait[i] = kRecv + TTL - now
		:: else -> aWait[i] = 0
		fi;
		aPh[i] = 1 }
	/* its answer: lead */
	:: d_step { aPh[i] == 2 ->
		gid[i] = aSeq[i];  /* the grant made for this node */
		gen[i] = (gen[i] + 1) % 4;
		fence[i] = aEntry[i] + TTL - MARGIN;
#ifdef BUG_NO_WAIT
		from[i] = aEntry[i];
#else
		from[i] = aEntry[i] + aWait[i];
#endif
		cn[i] = 0; ce[i] = 0;
		aPh[i] = 0; aEntry[i] = 0; aSeq[i] = 0; aWait[i] = 0 }
	:: d_step { aPh[i] == 2 -> aPh[i] = 0; aEntry[i] = 0; aSeq[i] = 0; aWait[i] = 0 }   /* the answer lost */
	:: d_step { aPh[i] == 3 -> aPh[i] = 0; aEntry[i] = 0; aSeq[i] = 0; aWait[i] = 0 }
	/* Renew */
	:: d_step { gid[i] != 0 && rPh[i] == 0 && fence[i] < now + TTL - MARGIN -> rSent[i] = now; rPh[i] = 1 }   /* once a tick at most */
	:: d_step { rPh[i] == 2 ->
		if
		:: gid[i] != 0 -> fence[i] = rSent[i] + TTL - MARGIN
		:: else
		fi;
		rPh[i] = 0; rSent[i] = 0 }
	:: d_step { rPh[i] == 3 -> stepDown(i); rPh[i] = 0; rSent[i] = 0 }   /* ErrLost */
	:: d_step { rPh[i] == 4 -> rPh[i] = 0; rSent[i] = 0 }                /* no answer: the fence runs out */
	/* not renewed in time */
	:: d_step { gid[i] != 0 && now >= fence[i] -> stepDown(i) }
	/* Next: take an id while leading, in order from the range */
	:: d_step { leading(i) && cn[i] < ce[i] ->
		assert(cn[i] > lastTaken);            /* I3: larger than every id taken before */
		lastTaken = cn[i];
		cn[i]++ }
	/* loadLocked: a fresh range when the one held is used up */
	:: d_step { leading(i) && cn[i] >= ce[i] && lPh[i] == 0 && maxid + STEP <= MAXID ->
		lGen[i] = gen[i]; lBegan[i] = now; lPh[i] = 1 }
	/* the load's answer */
	:: d_step { lPh[i] == 2 ->
		if
		:: SAMEGEN(i) && leading(i) && BEGAN(i) ->
			cn[i] = lStart[i]; ce[i] = lStart[i] + STEP
		:: else                               /* thrown away */
		fi;
		lPh[i] = 0; lGen[i] = 0; lBegan[i] = 0; lStart[i] = 0 }
	:: d_step { lPh[i] == 3 -> lPh[i] = 0; lGen[i] = 0; lBegan[i] = 0 }
	/* stop or Yield: step down, then Release (conditional on the grant) */
	:: d_step { gid[i] != 0 && rPh[i] == 0 ->
		if
		:: kGid == gid[i] -> kGid = 0; kRel = 1; kSeq++
		:: true                               /* lost on the way */
		fi;
		stepDown(i) }
	/* kill -9 and a restart: all in memory is gone */
	:: d_step { crashes < MAXCRASH -> crashes++; stepDown(i);
		aPh[i] = 0; aEntry[i] = 0; aSeq[i] = 0; aWait[i] = 0;
		rPh[i] = 0; rSent[i] = 0; lPh[i] = 0; lGen[i] = 0; lBegan[i] = 0; lStart[i] = 0 }
	od
}

init {
	atomic {
		run Clock();
		run Net();
		run Operator();
		run Leader(0);
		run Leader(1)
	}
}
