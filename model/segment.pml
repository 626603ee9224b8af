/*
 * segment.pml: range reservation with floors, peer floors, auto-create and
 * hand-back (invariant I1, docs/protocol.md): every range a node serves is
 * above every floor any node or store revision has seen, so no id is handed
 * out twice.
 *
 * Mirrors:
 *   segment/buffer.go     tagBuf.attempt (floor = max(own, PeerFloor);
 *   segment/reserve.go    NextAbove when floor > 0; the floor guard on the
 *                         range granted; Floors.Raise before any id of it;
 *                         then Reserver.checkIncarnation: the store's
 *                         incarnation read again, the range dropped when it
 *                         is not the one the range was asked of)
 *   segment/engine.go     Engine.autoCreate (checkIncarnation, CreateCheck,
 *                         Create refused for a remembered tag)
 *   segment/kvstore/kvstore.go  cas / record.lowered (a revision whose
 *                         max_id is below the one before it refuses every
 *                         write, unless it is a HandBack's), NextAbove, the
 *                         purge marker that keeps a deleted tag, HandBack
 *                         (only while max_id is still the range's end)
 *   segment/floors.go     FloorFile (durable, survives a crash)
 *   peers/floors.go       Set.HearFloors (the live nodes' floors at start),
 *                         Set.Announce / heard (leaf.floor.<tag>, may be
 *                         lost), Set.HighestFloor (the live nodes' floors of
 *                         the tag before a create; node/peers.go createCheck)
 *   segment/handback.go   Engine.HandBack (own floor lowered first, then
 *                         the store's compare-and-swap)
 *   node/handback.go      handBack (only when no other node is alive)
 *
 * What it abstracts: one tag on the JetStream KV store (bucket history 2:
 * the current revision and the one before), N nodes, ranges of STEP ids; a
 * node holds one range at a time (the double buffer's second range is a
 * later load); the members protocol is abstracted to what it guarantees: a
 * check hears every node that is up (a silent member is waited for), so a
 * crashed node is not heard; no time: the store and the messages order the
 * events. Faults: crash (buffers and heard peer floors lost, the floor file
 * kept), a restart on a new data directory (floor file lost), freeze (not
 * scheduled), a reservation delayed, lost, or committed with its answer lost,
 * floor announcements lost, and the operator: the key deleted (a marker),
 * the bucket replaced (a new incarnation), max_id lowered (a put).
 *
 * Planted bugs (scripts/model.sh expects a counterexample for each):
 *   BUG_NO_FLOOR        no floor: plain Next, no guard on the range
 *   BUG_NO_CREATECHECK  auto-create without asking the live nodes
 *   BUG_NO_HANDBACK_CAS hand-back not conditional on max_id
 *   BUG_NO_INCARNATION_AFTER  a range served without reading the store's
 *                       incarnation again after its floor was recorded
 *                       (with OP_REPLACE: the bucket replaced while a
 *                       reservation is in flight)
 */

#ifndef N
#define N 2
#endif
#define STEP 2
#ifndef MAXID
#define MAXID 9     /* ids 1..MAXID-1 */
#endif
#ifndef MAXOPS
#define MAXOPS 1
#endif
#if defined(OP_REPLACE) || defined(OP_LOWER2)
#undef MAXCRASH
#define MAXCRASH 0
#define STOPS 0
#else
#ifndef MAXCRASH
#define MAXCRASH 1
#endif
#define STOPS 1
#endif

#define max(a, b) ((a) > (b) -> (a) : (b))

/* the store: the tag's key in bucket leaf_alloc */
byte sMax;          /* max_id of the current revision; 0: no record */
byte sPrev;         /* max_id of the revision before it (history 2); 0 none */
byte sBack;         /* handed_back_from of the current revision */
bit  sMark;         /* the last message is a delete marker (the tag was deleted) */
byte inc = 1;       /* the bucket's incarnation */

int  issued;        /* bit k: id k was handed out */

/* nodes */
bit  up[N];
byte floor[N];      /* segment-floors.json: the tag's floor (durable) */
byte finc[N];       /* segment-floors.json: the store incarnation served from; 0 none */
byte pfl[N];        /* peer floors heard (memory) */
byte bn[N];         /* the range held: [bn, be) */
byte be[N];
/* a reservation in flight */
byte lPh[N];        /* 0 none, 1 sent, 2 granted, 3 refused/failed, 4 unknown tag, 5 sent by a process that died,
                       6 granted and its floor recorded: the incarnation to check */
byte lFloor[N];     /* the floor it was asked above */
byte lStart[N];
byte lInc[N];       /* the incarnation known when it was asked (read before the store's answer) */
/* an announcement in flight: the floor another node should hear */
byte ann[N];        /* ann[j]: floor on its way to node j, 0 none */

byte ops;
byte crashes;

#define lowered() (sPrev > max(sMax, sBack))

/* GAP_LOWER2_INFLIGHT lets max_id be lowered twice while a floor
 * announcement or a reservation is on its way, or lost (a known gap,
 * docs/protocol.md). An announcement lost on a reconnect is made up for by
 * the gather after it (peers.Set.Reconnected), which this model leaves out:
 * with the flag it still loses announcements. */
#ifdef GAP_LOWER2_INFLIGHT
#define LOWER2_OK true
#else
#define LOWER2_OK (lPh[0] == 0 && lPh[1] == 0)
#endif

#if defined(OP_LOWER2) && !defined(GAP_LOWER2_INFLIGHT)
/* announced and heard at once: the assumption this act is checked under */
inline announce(i, f) {
	if :: i != 0 && up[0] -> pfl[0] = max(pfl[0], f) :: else fi;
	if :: i != 1 && up[1] -> pfl[1] = max(pfl[1], f) :: else fi
}
#else
inline announce(i, f) {
	if :: i != 0 && up[0] -> ann[0] = max(ann[0], f) :: else fi;
	if :: i != 1 && up[1] -> ann[1] = max(ann[1], f) :: else fi
}
#endif

/* NextAbove / Next at the store */
inline reserve(i) {
	if
	:: sMax == 0 -> lPh[i] = 4                          /* unknown tag */
	:: sMax != 0 && lowered() -> lPh[i] = 3             /* the store refuses: a lowered max_id */
#ifndef BUG_NO_FLOOR
	:: sMax != 0 && !lowered() && lFloor[i] > 0 && sMax < lFloor[i] -> lPh[i] = 3   /* NextAbove: below the floor */
	:: sMax != 0 && !lowered() && (lFloor[i] == 0 || sMax >= lFloor[i]) && sMax + STEP <= MAXID ->
#else
	:: sMax != 0 && !lowered() && sMax + STEP <= MAXID ->
#endif
		lStart[i] = sMax; sPrev = sMax; sMax = sMax + STEP; sBack = 0; lPh[i] = 2
	:: else -> lPh[i] = 3                               /* the model's ids run out */
	fi
}

proctype Net() {
end:	do
	:: d_step { lPh[0] == 1 -> reserve(0) }
	:: d_step { lPh[1] == 1 -> reserve(1) }
	:: d_step { lPh[0] == 1 -> lPh[0] = 3 }             /* lost */
	:: d_step { lPh[1] == 1 -> lPh[1] = 3 }
	:: d_step { lPh[0] == 2 -> lPh[0] = 3; lStart[0] = 0 }   /* committed, answer lost */
	:: d_step { lPh[1] == 2 -> lPh[1] = 3; lStart[1] = 0 }
	/* the reservation of a process that died: committed or not, unanswered */
	:: d_step { lPh[0] == 5 -> lFloor[0] = 0; reserve(0); lPh[0] = 0; lStart[0] = 0 }
	:: d_step { lPh[1] == 5 -> lFloor[1] = 0; reserve(1); lPh[1] = 0; lStart[1] = 0 }
	:: d_step { lPh[0] == 5 -> lPh[0] = 0 }
	:: d_step { lPh[1] == 5 -> lPh[1] = 0 }
	/* leaf.floor.<tag> heard, or lost */
	:: d_step { ann[0] != 0 -> if :: up[0] -> pfl[0] = max(pfl[0], ann[0]) :: else fi; ann[0] = 0 }
	:: d_step { ann[1] != 0 -> if :: up[1] -> pfl[1] = max(pfl[1], ann[1]) :: else fi; ann[1] = 0 }
#if !defined(OP_LOWER2) || defined(GAP_LOWER2_INFLIGHT)
	:: d_step { ann[0] != 0 -> ann[0] = 0 }
	:: d_step { ann[1] != 0 -> ann[1] = 0 }
#endif
	od
}

proctype Operator() {
end:	do
	/* nats kv del leaf_alloc TAG: a purge marker that keeps the row */
	:: d_step { ops < MAXOPS && sMax != 0 -> ops++; sPrev = 0; sMax = 0; sBack = 0; sMark = 1 }
#ifdef OP_REPLACE
	/* the bucket deleted and made again: a new incarnation, nothing kept.
	 * A store that forgets a tag while no node that served it is alive has
	 * no record left to refuse it with (docs/fault-model.md, "Outside the
	 * promise"): with this act the nodes neither crash nor stop. It may
	 * come at any point of a reservation in flight: the incarnation check
	 * after the floor is recorded drops a range granted by the old bucket. */
	:: d_step { ops < MAXOPS -> ops++; inc++; sPrev = 0; sMax = 0; sBack = 0; sMark = 0 }
#endif
	/* max_id lowered by a put (to the first id) */
	:: d_step { ops < MAXOPS && sMax > 1 -> ops++; sPrev = sMax; sMax = 1; sBack = 0 }
#ifdef OP_LOWER2
	/* ... and put again: the bucket's history no longer shows the higher
	 * max_id, only the floors of the nodes do (with this act, as with a
	 * replaced bucket, the nodes neither crash nor stop: a node down is
	 * not asked) */
	:: d_step { ops < MAXOPS && sMax > 1 && LOWER2_OK -> ops++; sPrev = 1; sMax = 1; sBack = 0 }
#endif
	od
}

proctype Node(byte i) {
	byte f, k;
end:	do
	/* tagBuf.attempt: ask for a range above the floor */
	:: d_step { up[i] && lPh[i] == 0 && bn[i] >= be[i] ->
		lFloor[i] = max(floor[i], pfl[i]); lInc[i] = inc; lPh[i] = 1 }
	/* its answer: the floor guard, the floor raised (fsynced) ... */
	:: d_step { up[i] && lPh[i] == 2 ->
		if
#ifndef BUG_NO_FLOOR
		:: lStart[i] < lFloor[i] ->                 /* ErrBelowFloor: no id served */
			lPh[i] = 0; lFloor[i] = 0; lStart[i] = 0; lInc[i] = 0
		:: else ->
#else
		:: true ->
#endif
			floor[i] = max(floor[i], lStart[i] + STEP);
			lPh[i] = 6
		fi }
	/* ... then the store's incarnation read afresh: the same, the range is
	 * served and announced; another, it is dropped and auto-create is off
	 * (Engine.markReplaced) */
	:: d_step { up[i] && lPh[i] == 6 ->
		if
#ifndef BUG_NO_INCARNATION_AFTER
		:: inc != lInc[i] -> if :: finc[i] == 0 -> finc[i] = lInc[i] :: else fi
		:: else ->
#else
		:: true ->
#endif
			finc[i] = inc;
			bn[i] = lStart[i]; be[i] = lStart[i] + STEP;
			announce(i, be[i])
		fi;
		lPh[i] = 0; lFloor[i] = 0; lStart[i] = 0; lInc[i] = 0 }
	:: d_step { up[i] && lPh[i] == 3 -> lPh[i] = 0; lFloor[i] = 0; lInc[i] = 0 }
	/* an unknown tag: Engine.autoCreate */
	:: up[i] && lPh[i] == 4 ->
		d_step {
		f = 0;
		if
		:: finc[i] != 0 && finc[i] != inc -> f = 255  /* checkIncarnation: the store was replaced */
		:: else ->
#ifndef BUG_NO_CREATECHECK
			/* createCheck: the live nodes' floors of the tag, and its own */
			f = floor[i];
			for (k : 0 .. N - 1) {
				if :: k != i && up[k] -> f = max(f, floor[k]) :: else fi
			}
			k = 0
#else
			skip
#endif
		fi }
		/* (the create reaches the store later) */
		d_step {
		if
		:: f == 0 && sMax == 0 && !sMark -> sMax = 1; sPrev = 0; sBack = 0   /* Create */
		:: else                                       /* refused, or created by another */
		fi;
		f = 0; lPh[i] = 0; lFloor[i] = 0; lInc[i] = 0 }
	/* hand out an id */
	:: d_step { up[i] && bn[i] < be[i] ->
		assert((issued & (1 << bn[i])) == 0);        /* I1: no id twice */
		issued = issued | (1 << bn[i]);
		bn[i]++ }
	/* a graceful stop: hand back the unserved ids when alone */
	:: d_step { STOPS && up[i] && bn[i] < be[i] && lPh[i] == 0 ->
		f = 0;
		for (k : 0 .. N - 1) {
			if :: k != i && up[k] -> f = 1 :: else fi
		}
		k = 0;
		if
		:: f == 0 ->
			floor[i] = bn[i];                         /* its own floor first */
			if
#ifndef BUG_NO_HANDBACK_CAS
			:: sMax == be[i] && !lowered() ->
#else
			:: sMax != 0 ->
#endif
				sPrev = sMax; sBack = sMax; sMax = bn[i]
			:: else                                   /* ErrMoved */
			fi
		:: else
		fi;
		f = 0; up[i] = 0; bn[i] = 0; be[i] = 0; pfl[i] = 0 }
	/* kill -9 */
	:: d_step { up[i] && crashes < MAXCRASH -> crashes++;
		up[i] = 0; bn[i] = 0; be[i] = 0; pfl[i] = 0;
		if :: lPh[i] == 1 -> lPh[i] = 5 :: lPh[i] != 1 -> lPh[i] = 0; lStart[i] = 0 fi; lFloor[i] = 0; lInc[i] = 0 }
	/* started again: the live nodes' floors first (startPeerFloors) */
	:: d_step { !up[i] && lPh[i] == 0 ->
		up[i] = 1;
		for (k : 0 .. N - 1) {
			if :: k != i && up[k] -> pfl[i] = max(pfl[i], floor[k]) :: else fi
		}
		k = 0 }
	/* ... or on a new data directory (an operator's act) */
	:: d_step { !up[i] && lPh[i] == 0 && ops < MAXOPS -> ops++;
		floor[i] = 0; finc[i] = 0; up[i] = 1;
		for (k : 0 .. N - 1) {
			if :: k != i && up[k] -> pfl[i] = max(pfl[i], floor[k]) :: else fi
		}
		k = 0 }
	od
}

init {
	atomic {
		sMax = 1;         /* the tag exists */
		up[0] = 1; up[1] = 1;   /* both nodes started (and met) before anything */
		run Net();
		run Operator();
		run Node(0);
		run Node(1)
	}
}
