/*
 * settle.pml: settle's payment protocol for one settlement, checked by Spin
 * (DESIGN.md section 21; README, "The model").
 *
 * The payment path (the default): NW workers run the settlement's
 * send_instruction job and the sweep's checks (reconcile.Resolver: load,
 * consent, claim, POST, question, decision, apply), concurrently, each
 * crashing at any crash point and then run again; the bank (idempotent by
 * key while it remembers the key, which it forgets TTL after it first saw
 * it; pays, rejects, settles, fails, returns; loses answers, answers 5xx
 * and 429); the network (a POST arrives at most RB after it was decided);
 * statements (the bank's line of the payment and of its return); the
 * clock (0..MAXT).
 *
 * The intake path (-DINTAKE): the producer's event delivered once or twice
 * through a queue (fetch, commit, ack; a crash anywhere redelivers), the
 * transitions that follow, and the outbox relay to a receiver that
 * deduplicates by event id.
 *
 * Every decision is read from decisions.pml, generated from the Go decision
 * functions (go generate ./model): the model checks the code's decisions.
 * What the Resolver does around them (load, claim, apply) is written here
 * after reconcile/resolver.go, and says so where it does.
 *
 * Configurations: -DBANK=BANK_SETTLE|BANK_STRIPE|BANK_OBIE|BANK_LISTONLY|BANK_BYID,
 * and -DINTAKE. Mutants: SETTLE_MUTANT=n in pan's environment (M_* below);
 * model_test.go runs each and expects Spin to find a counterexample.
 */

#ifndef TTL
#define TTL 2          /* the bank's key window = --bank-key-ttl, in ticks */
#endif
#ifndef RB
#define RB 1           /* RequestBound: from a decision to send to its arrival */
#endif
#ifndef MAXT
#define MAXT 2         /* the clock stops here */
#endif
#ifndef MAXFAULT
#define MAXFAULT 1     /* lost answers, timeouts, 5xx and 429 */
#endif
#ifndef MAXCRASH
#define MAXCRASH 1     /* crashes */
#endif
#ifndef NW
#define NW 2           /* workers */
#endif
#ifndef CW
#define CW 1           /* the consent wait, in ticks */
#endif
#ifndef STRANGERS
#define STRANGERS 0    /* 1: a credit under our reference that is no return */
#endif
#ifndef WATCH
#define WATCH 1        /* status checks of the return watch */
#endif

#include "decisions.pml"

/* The mutant to run (0: none): SETTLE_MUTANT in pan's environment, read
 * once at the start (model_test.go runs each and expects a counterexample). */
byte mutant;
#define M_KEY_ALIVE 1          /* a used key is resent while merely younger than the TTL */
#define M_CLAIM_AFTER_POST 2   /* first_attempt_at recorded with the answer, not before the POST */
#define M_MOVE_ON_ACCEPT 3     /* the payout movement written when the bank accepted */
#define M_RETURN_NO_REVERSAL 4 /* a return moves to returned without its reversal */
#define M_RETURN_UNMARKED 5    /* a credit without return information books a return */
#define M_ACK_BEFORE_COMMIT 6  /* the queue message acknowledged before its commit (INTAKE) */
#define M_RELAY_NEWEST 7       /* the relay sends a settlement's newest event first (INTAKE) */
#define M_NO_RECHECK 8         /* the sweep loads an uncertain settlement and never asks (liveness) */

#define TERMINAL(s) ((s) == S_CONFIRMED || (s) == S_FAILED || (s) == S_RETURNED)

byte crashes, faults;
#define CAN_CRASH (crashes < MAXCRASH)
#define CAN_FAULT (faults < MAXFAULT)

#ifdef INTAKE
/* ---------------------------------------------------------------------
 * The intake path: queue, intake transaction, ack, outbox relay.
 * ------------------------------------------------------------------- */

#ifndef EVENTS
#define EVENTS 3       /* events of the settlement: pending, then two transitions */
#endif

byte inq;            /* copies of the event not yet acknowledged */
bool received;       /* receipt, settlement, send job, first event: one transaction */
byte nev;            /* events written to the outbox */
byte delivered;      /* events the relay recorded as delivered */
byte seen;           /* events the receiver has taken (deduplicated by id) */

/* The queue's consumer (source.Engine): fetch, commit, ack. */
proctype Source() {
endsrc:
	do
	:: inq > 0 ->
		if
		:: mutant == M_ACK_BEFORE_COMMIT ->
			inq--;
			if :: CAN_CRASH -> crashes++; goto endsrc :: else -> skip fi
		:: else -> skip
		fi;
		atomic {
			if
			:: CAN_CRASH -> crashes++; goto endsrc      /* source.before_commit */
			:: true
			fi;
			if
			:: !received -> received = 1; nev++     /* settlement.pending */
			:: else -> skip                          /* a replay: nothing else */
			fi
		}
		atomic {
			if
			:: mutant == M_ACK_BEFORE_COMMIT -> skip
			:: mutant != M_ACK_BEFORE_COMMIT && CAN_CRASH -> crashes++   /* source.after_commit: not acknowledged */
			:: mutant != M_ACK_BEFORE_COMMIT -> inq--                    /* ack */
			fi
		}
	od
}

/* The settlement's later transitions, each writing its event in its
 * transaction. */
proctype Engine() {
endeng:
	do
	:: atomic { received && nev < EVENTS -> nev++ }
	od
}

/* The outbox relay (events.Relay): a settlement's oldest undelivered event,
 * at least once; a crash after the send (events.after_send) sends it again. */
proctype Relay() {
	byte id;
endrelay:
	do
	:: atomic {
		delivered < nev ->
		id = (mutant == M_RELAY_NEWEST -> nev : delivered + 1);
		/* the receiver: new ids in order, known ids again are dropped */
		if
		:: id == seen + 1 -> seen++
		:: id <= seen -> skip
		:: else -> assert(false)   /* an event before its predecessor */
		fi;
		id = 0
	   }
		atomic {
			if
			:: CAN_CRASH -> crashes++    /* events.after_send */
			:: true -> delivered++
			fi
		}
	od
}

proctype Quiescent() {
	timeout ->
	assert(received);     /* no event lost: acknowledged only after its commit */
	assert(seen == nev)   /* every event delivered, once each, in order */
}

/* The liveness property (pan -a -f -N done): under weak fairness the
 * event is taken and every event of the settlement delivered. safe is the
 * claim of the safety run (pan -N safe): it accepts nothing and blocks
 * nothing. */
ltl safe { [] true }
ltl done { <> (received && nev == EVENTS && seen == nev) }

init {
	c_code { char *m = getenv("SETTLE_MUTANT"); now.mutant = m ? atoi(m) : 0; };
	atomic {
		if :: inq = 1 :: inq = 2 fi;   /* the producer's retry, or none */
		run Source(); run Engine(); run Relay(); run Quiescent()
	}
}

#else
/* ---------------------------------------------------------------------
 * The payment path.
 * ------------------------------------------------------------------- */

byte now;
/* dl[t]: requests decided at t, and answers to decide on that arrived at
 * t, that must reach the bank (be decided) by t + RB; the clock waits. */
byte dl[MAXT + 1];

/* The key's age class as the decisions see it (decisions.pml). The mutant
 * M_KEY_ALIVE has the old rule: a key is usable while younger than the
 * TTL, however long the request then takes to arrive. */
#define KEYCLASS(att) (!(att) -> K_NONE : \
	(mutant == M_KEY_ALIVE -> (now - first < TTL -> K_YOUNG : K_OLD) : \
	(now - first + RB < TTL -> K_YOUNG : (now - first < TTL -> K_EDGE : K_OLD))))

/* The send claim (resolver.send): UPDATE settlements SET first_attempt_at =
 * COALESCE(first_attempt_at, now) WHERE state = 'pending' AND
 * (first_attempt_at IS NULL OR first_attempt_at > now + RequestBound - KeyTTL):
 * a used key only while a POST decided now arrives before the bank forgets
 * it. */
#define CLAIMABLE(k) ((k) == K_NONE || (k) == K_YOUNG)

/* The database (committed state). */
#define C_NONE 0
#define C_AWAIT 1
#define C_AUTH 2

byte st = S_PENDING;
bool attempted;   /* first_attempt_at is set */
byte first;       /* first_attempt_at */
bool flagged;     /* needs_investigation */
bool due = 1;     /* next_check_at is set: the sweep will check it */
bool sendjob = 1; /* the send_instruction job is not completed */
bool payid;       /* bank_payment_id is known */
byte cons;        /* consent_status as settle knows it */
bool consasked;   /* consent_requested_at is set */
byte creq;        /* consent_requested_at */
byte watch;       /* return-watch checks left */
byte payouts, reversals;

/* The bank. */
#define B_NONE 0
#define B_ACCEPTED 1
#define B_SETTLED 2
#define B_FAILED 3
#define B_RETURNED 4

#define BC_NONE 0
#define BC_AWAIT 1
#define BC_AUTH 2
#define BC_REJECTED 3
#define BC_CONSUMED 4

byte npay;        /* payments executed for the settlement */
byte bstat;       /* the payment's status */
bool bsettled;    /* it settled at some time */
bool bfinal;      /* the bank will not return it */
bool keyseen, keyrej;
byte keyat;       /* when the bank first saw the key (since it last forgot it) */
byte bcons;       /* the consent at the bank */
bool stranger;    /* a credit under our reference that is no return */

#define REMEMBERS (keyseen && now < keyat + TTL)

#if CAP_FAILED_IS_RETURN
#define RETANS A_FAILED
#elif CAP_RETURNS_ON_STATEMENTS_ONLY
#define RETANS A_SETTLED
#else
#define RETANS A_RETURNED
#endif
/* The payment as the bank's status API reports it. */
#define PAYANS (bstat == B_ACCEPTED -> A_ACCEPTED : (bstat == B_SETTLED -> A_SETTLED : (bstat == B_FAILED -> A_FAILED : RETANS)))

/* The network: POSTs in flight (worker, decided at). An answer goes to its
 * worker if it still waits: all its POSTs carry the same key and body, so
 * any of their answers is the bank's word on that key. */
#define R_NONE 255
#define R_LOST 254
chan net = [2] of { byte, byte };
bool waiting[NW];
byte resp[NW];

bool paidline, retline, strangerline;   /* statement lines imported */

proctype Clock() {
endclock:
	do
	:: atomic { now < MAXT && (now < RB || dl[now - RB] == 0) -> now++ }
	od
}

/* The bank's API: POSTs arrive and are answered (the payment's own moves
 * are Payments'). */
proctype Bank() {
	byte w, at, ans;
endbank:
	do
	:: atomic {
		net ? w, at ->
		dl[at]--;
		if
		:: REMEMBERS ->
			/* the key again: the same outcome, no second execution */
			if
			:: keyrej -> ans = A_REJECTED
#if CAP_REPLAY_ORIGINAL
			:: else -> ans = A_ACCEPTED   /* the original response */
#else
			:: else -> ans = PAYANS
#endif
			fi
		:: else ->
			/* a key the bank does not know (any more): executed */
			keyseen = 1; keyat = now;
			if
			:: CAP_CONSENT && bcons != BC_AUTH -> keyrej = 1; ans = A_REJECTED   /* no consent, or used */
			:: !(CAP_CONSENT && bcons != BC_AUTH) && npay == 0 -> keyrej = 1; ans = A_REJECTED
			:: !(CAP_CONSENT && bcons != BC_AUTH) ->
				assert(npay == 0);   /* the bank pays each settlement at most once */
				npay++; bstat = B_ACCEPTED; keyrej = 0;
				if :: CAP_CONSENT -> bcons = BC_CONSUMED :: else -> skip fi;
				ans = A_ACCEPTED
			fi
		fi;
		if
		:: waiting[w] -> resp[w] = ans
		:: waiting[w] && CAN_FAULT -> faults++; resp[w] = R_LOST   /* the answer is lost */
		:: else -> skip
		fi;
		w = 0; at = 0; ans = 0
	   }
	od
}

/* The payment's own life at the bank, and the customer's: a process of its
 * own, so that under weak fairness (the liveness run) the bank's answers
 * cannot starve it: a payment accepted stays accepted only until this
 * process moves, as a real bank settles or fails it in the end. */
proctype Payments() {
endpay:
	do
	:: atomic { bstat == B_ACCEPTED -> bstat = B_SETTLED; bsettled = 1; bfinal = 1 }   /* settled for good */
	:: atomic { bstat == B_ACCEPTED -> bstat = B_SETTLED; bsettled = 1 }               /* settled, to come back */
	:: atomic { bstat == B_ACCEPTED -> bstat = B_FAILED }
	:: atomic { bstat == B_SETTLED && !bfinal -> bstat = B_RETURNED }
	:: atomic { bcons == BC_AWAIT -> bcons = BC_AUTH }
	:: atomic { bcons == BC_AWAIT -> bcons = BC_REJECTED }
	:: atomic { (STRANGERS || mutant == M_RETURN_UNMARKED) && npay > 0 && !stranger -> stranger = 1 }
	od
}

/* apply: the transaction that records a decision (Resolver.apply): the
 * transition, the flag, the movement, the bank's payment id, the next
 * check, the job's completion; a settlement that moved since it was
 * loaded (a lost race) gets nothing. Runs inside an atomic. */
inline apply(fst, d, gotpay, complete, lost) {
	if
	:: st != fst -> lost = 1
	:: else ->
		lost = 0;
		if
		:: D_TO(d) != fst ->
			assert(T_allowed[IX_allowed(fst, D_TO(d))] == 1);   /* only allowed transitions */
			st = D_TO(d)
		:: else -> skip
		fi;
		if
		:: D_HAS(d, D_FLAG) -> flagged = 1
		:: !D_HAS(d, D_FLAG) && (D_HAS(d, D_DEF) || TERMINAL(D_TO(d))) -> flagged = 0
		:: else -> skip
		fi;
		if
		:: D_HAS(d, D_MOVE) ->
			assert(D_TO(d) == S_CONFIRMED);
			assert(payouts == 0);          /* one payout, never left to UNIQUE */
			assert(npay == 1 && bsettled); /* never a movement without a settled payment */
			payouts++;
			watch = (CAP_RETURNS_ON_STATEMENTS_ONLY -> 0 : WATCH)
		:: else -> skip
		fi;
		if
		:: D_HAS(d, D_REVERSE) ->
			assert(D_TO(d) == S_RETURNED);
			assert(payouts == 1 && reversals == 0);
			assert(bstat == B_RETURNED);   /* a reversal only of a returned payment */
			reversals++
		:: else -> skip
		fi;
		if :: gotpay -> payid = 1 :: else -> skip fi;
		if
		:: fst == S_CONFIRMED && watch > 0 -> watch--
		:: else -> skip
		fi;
		due = (D_HAS(d, D_RESEND) || D_HAS(d, D_PAY) ||
		       (st == S_CONFIRMED -> (!flagged && watch > 0) : (D_HAS(d, D_CHECK) && !TERMINAL(st))));
		if :: complete -> sendjob = 0 :: else -> skip fi
	fi
}

/* A worker runs the settlement's jobs (the send job and the sweep's
 * checks), any number of times, concurrently with the other worker. Its
 * steps (pc) are the points where others may act in between: each is one
 * atomic step of the model, ending where the code waits for the bank or
 * commits. A crash (at a crash point: a branch of a step) loses the local
 * state; the job is run again later (River's rescue, the sweep). */
#define P_IDLE 0
#define P_CLAIM 1      /* loaded, to claim and POST */
#define P_POSTED 2     /* waiting for the POST's answer */
#define P_ASKED 3      /* has the answer of a status question */
#define P_CONSENTED 4  /* has the answer about the consent */
#define P_PAY 5        /* consent authorised and recorded: claim and POST */

/* The worker's locals back to their idle values (fewer states). */
inline reset() {
	pc = P_IDLE; fst = 0; q = 0; ans = 0; d = 0; at = 0; fatt = 0; fpay = 0; lost = 0; issend = 0; hold = 0
}

/* Release what a dead or finished job holds: its deadline, its wait. */
inline release() {
	if :: hold -> dl[at]-- :: else -> skip fi;
	if :: waiting[w] -> waiting[w] = 0; resp[w] = R_NONE :: else -> skip fi
}

/* The send claim and the POST (Resolver.send), decided at `at`: the claim
 * commits first_attempt_at, then the POST leaves; or the claim fails (the
 * settlement moved, or its key is no longer usable), or the process dies
 * at send.before_bank, or the bank answers 5xx or 429 before processing. */
inline claim_post() {
	if
	:: st == S_PENDING && CLAIMABLE(KEYCLASS(attempted)) ->
		if :: !attempted && mutant != M_CLAIM_AFTER_POST -> attempted = 1; first = now :: else -> skip fi;
		due = 1;   /* next_check_at: the sweep takes over after the lease */
		if :: !hold -> at = now; dl[at]++; hold = 1 :: else -> skip fi;
		fst = S_PENDING; fatt = 1;
		if
		:: CAN_CRASH -> crashes++; release(); reset()                      /* send.before_bank */
		:: CAN_FAULT -> faults++; dl[at]--; hold = 0; if :: ans = A_AMBIGUOUS :: ans = A_429 fi;
			if :: mutant == M_CLAIM_AFTER_POST && !attempted -> attempted = 1; first = at :: else -> skip fi;
			d = T_send[IX_send(S_PENDING, KEYCLASS(1), ans)]; assert(d != -1);
			apply(S_PENDING, d, 0, issend, lost); reset()
		:: true -> net ! w, at; hold = 0; waiting[w] = 1; resp[w] = R_NONE; pc = P_POSTED
		fi
	:: else ->
		/* nothing sent: the job ends */
		if :: issend -> sendjob = 0 :: else -> skip fi;
		release(); reset()
	fi
}

proctype Worker(byte w) {
	byte pc, fst, q, ans, at;
	short d;
	bool fatt, fpay, lost, issend, hold;

endw:
	do
	/* a job starts: load, then StartSend or StartResolve */
	:: atomic {
		pc == P_IDLE && (sendjob || (due && !flagged)) ->
		if
		:: sendjob -> issend = 1
		:: due && !flagged -> issend = 0
		fi;
		fst = st; fatt = attempted; fpay = payid;
		if
		:: issend -> d = T_start_send[IX_start_send(fst, KEYCLASS(fatt))]
		:: else -> d = T_start_resolve[IX_start_resolve(fst, KEYCLASS(fatt), (fst == S_CONFIRMED && !flagged && watch > 0))]
		fi;
		if :: mutant == M_NO_RECHECK && !issend && fst == S_UNCERTAIN -> d = ACT_NONE :: else -> skip fi;
		if
		:: d == ACT_NONE ->
			/* nothing to do: the job completes (the mutant keeps it due) */
			if :: issend -> sendjob = 0 :: else -> due = (mutant == M_NO_RECHECK && fst == S_UNCERTAIN) fi;
			reset()
		:: d == ACT_SEND && CAP_CONSENT && fst == S_PENDING && !fatt && cons != C_AUTH ->
			/* the consent step (Resolver.consent), asked now */
			if
			:: flagged -> if :: issend -> sendjob = 0 :: else -> skip fi; reset()   /* a human owns it */
			:: !flagged ->
				if :: !consasked -> consasked = 1; creq = now :: else -> skip fi;
				if
				:: CAN_CRASH -> crashes++; reset()                                   /* consent.before_bank */
				:: CAN_FAULT -> faults++; if :: ans = A_AMBIGUOUS :: ans = A_429 fi; pc = P_CONSENTED
				:: true ->
					if :: bcons == BC_NONE -> bcons = BC_AWAIT :: else -> skip fi;
					ans = (bcons == BC_AWAIT -> A_C_AWAIT : (bcons == BC_AUTH -> A_C_AUTH :
					      (bcons == BC_REJECTED -> A_C_REJECTED : A_C_CONSUMED)));
					pc = P_CONSENTED
				fi
			fi
		:: d == ACT_SEND && !(CAP_CONSENT && fst == S_PENDING && !fatt && cons != C_AUTH) -> pc = P_CLAIM
		:: d == ACT_CHECK ->
			/* Resolver.check: the strongest safe question, asked now */
			q = T_question[IX_question(fst, KEYCLASS(fatt), fpay)];
			assert(q != -1);
			fpay = 0;
			if
			:: q == Q_NONE ->
				/* flag(f, no_safe_question): written by hand after resolver.check */
				d = DEC((fst == S_PENDING || fst == S_SENT -> S_UNCERTAIN : fst), D_FLAG);
				apply(fst, d, 0, issend, lost); reset()
			:: q == Q_REPLAY ->
				/* the identical POST under the key (AskReplay) */
				at = now; dl[at]++;
				if
				:: CAN_FAULT -> faults++; dl[at]--; if :: ans = A_AMBIGUOUS :: ans = A_429 fi;
					d = T_replay[IX_replay(fst, KEYCLASS(fatt), ans)]; assert(d != -1);
					apply(fst, d, 0, issend, lost); reset()
				:: true -> net ! w, at; waiting[w] = 1; resp[w] = R_NONE; pc = P_POSTED
				fi
			:: q != Q_NONE && q != Q_REPLAY ->
				/* a status question, answered as the bank is now; the
				 * decision follows within RB */
				if
				:: CAN_FAULT -> faults++; if :: ans = A_AMBIGUOUS :: ans = A_429 fi
				:: q == Q_KEY -> ans = (REMEMBERS && !keyrej -> PAYANS : A_NOTFOUND)
				:: q == Q_ID -> assert(npay > 0); ans = PAYANS
				:: q == Q_REF || q == Q_SEARCH -> ans = (npay > 0 -> PAYANS : A_NOTFOUND)
				fi;
				at = now; dl[at]++; hold = 1; pc = P_ASKED
			fi
		fi
	   }

	/* the claim and the POST */
	:: atomic { pc == P_CLAIM || pc == P_PAY -> claim_post() }

	/* the POST's answer, or a timeout while it is still in flight */
	:: atomic {
		pc == P_POSTED && (resp[w] != R_NONE || CAN_FAULT) ->
		if
		:: resp[w] != R_NONE -> ans = (resp[w] == R_LOST -> A_AMBIGUOUS : resp[w])
		:: resp[w] == R_NONE -> faults++; ans = A_AMBIGUOUS
		fi;
		waiting[w] = 0; resp[w] = R_NONE;
		if
		:: CAN_CRASH -> crashes++; reset()    /* send.after_bank: the answer dies with the process */
		:: true ->
			if :: mutant == M_CLAIM_AFTER_POST && !attempted -> attempted = 1; first = at :: else -> skip fi;
			if
			:: q == Q_REPLAY -> d = T_replay[IX_replay(fst, KEYCLASS(fatt), ans)]
			:: else -> d = T_send[IX_send(S_PENDING, KEYCLASS(1), ans)]
			fi;
			assert(d != -1);
			apply(fst, d, (ans <= A_RETURNED), (issend && q != Q_REPLAY), lost);
			reset()
		fi
	   }

	/* the status answer decided and applied (DecideStatus); a resend goes
	 * back to pending in that transaction and is then claimed and POSTed
	 * under the same key, decided now */
	:: atomic {
		pc == P_ASKED ->
		dl[at]--; hold = 0;
		if
		:: CAN_CRASH -> crashes++; reset()    /* confirm.before_commit, return.before_commit */
		:: true ->
			d = T_status[IX_status(fst, KEYCLASS(fatt), q, ans)];
			assert(d != -1);
			if
			:: !D_HAS(d, D_RESEND) -> apply(fst, d, (ans <= A_RETURNED), issend, lost); reset()
			:: D_HAS(d, D_RESEND) ->
				apply(fst, d, (ans <= A_RETURNED), 0, lost);
				if
				:: lost -> reset()
				:: !lost -> at = now; dl[at]++; hold = 1; q = 0; pc = P_CLAIM
				fi
			fi
		fi
	   }

	/* the consent's answer decided and applied (DecideConsent) */
	:: atomic {
		pc == P_CONSENTED ->
		if
		:: CAN_CRASH -> crashes++; reset()    /* consent.after_bank */
		:: true ->
			d = T_consent[IX_consent((now - creq >= CW), ans)];
			assert(d != -1);
			if
			:: st == S_PENDING && !attempted ->
				apply(S_PENDING, d, 0, (issend && !D_HAS(d, D_PAY)), lost);
				if
				:: !lost && ans == A_C_AWAIT -> cons = C_AWAIT
				:: !lost && ans == A_C_AUTH -> cons = C_AUTH
				:: else -> skip
				fi
			:: else -> lost = 1
			fi;
			if
			:: !lost && D_HAS(d, D_PAY) -> pc = P_PAY; ans = 0; d = 0
			:: else -> reset()
			fi
		fi
	   }
	:: atomic { pc == P_PAY && CAN_CRASH -> crashes++; reset() }   /* consent.after_commit */
	od
}

/* Statements: the bank's lines under our reference, decided by
 * DecidePaid and DecideReturn (Resolver.ApplyPaid, ApplyReturn); the
 * payment's line is listed before its return's. A line whose decision
 * lost its race is not booked again. */
proctype Statements() {
	short d;
	bool lost;
endst:
	do
	:: atomic { bsettled && !paidline -> paidline = 1;
		d = T_paid[IX_paid(st, KEYCLASS(attempted), 0, 1)]; assert(d != -1);
		if :: D_TO(d) != st || D_HAS(d, D_FLAG) -> apply(st, d, 0, 0, lost) :: else -> skip fi;
		d = 0; lost = 0 }
	:: atomic { bstat == B_RETURNED && paidline && !retline -> retline = 1;
		d = T_return[IX_return(st, KEYCLASS(attempted), 1, 1)]; assert(d != -1);
		if :: D_TO(d) != st || D_HAS(d, D_FLAG) -> apply(st, d, 0, 0, lost) :: else -> skip fi;
		d = 0; lost = 0 }
	:: atomic { stranger && !strangerline -> strangerline = 1;
		d = T_return[IX_return(st, KEYCLASS(attempted), 0, 1)]; assert(d != -1);
		if :: D_TO(d) != st || D_HAS(d, D_FLAG) -> apply(st, d, 0, 0, lost) :: else -> skip fi;
		d = 0; lost = 0 }
	od
}

/* The liveness property (pan -a -f -N done; model_test.go): under weak
 * fairness every settlement ends terminal or flagged. safe is the claim of
 * the safety run (pan -N safe): it accepts nothing and blocks nothing, so
 * the assertions and end states are checked over every interleaving. */
ltl safe { [] true }
ltl done { <> (TERMINAL(st) || flagged) }

/* At quiescence (nothing can move any more): the end state. */
proctype Quiescent() {
	timeout ->
	assert(TERMINAL(st) || flagged);   /* no settlement stuck */
	/* the ledger agrees with the bank, or the settlement waits for a human */
	assert(flagged || payouts - reversals == (bstat == B_SETTLED -> 1 : 0))
}

init {
	byte k, x;
	c_code { char *m = getenv("SETTLE_MUTANT"); now.mutant = m ? atoi(m) : 0; };
	/* Decisions has ended when the count of processes is back to what
	 * it was (the never claim of an ltl property counts in it) */
	atomic { k = _nr_pr; run Decisions() }
	_nr_pr == k;
	/* the mutants of the decision table */
	d_step {
		k = 0;
		do
		:: k < 4 ->
			if
			:: mutant == M_MOVE_ON_ACCEPT ->
				T_send[IX_send(S_PENDING, k, A_ACCEPTED)] = DEC(S_CONFIRMED, D_MOVE|D_DEF);
				x = 0;
				do
				:: x < 3 -> T_status[IX_status(x, k, Q_KEY, A_ACCEPTED)] = DEC(S_CONFIRMED, D_MOVE|D_DEF); x++
				:: else -> break
				od
			:: mutant == M_RETURN_NO_REVERSAL ->
				x = 0;
				do
				:: x < 5 ->
					if
					:: D_HAS(T_status[IX_status(S_CONFIRMED, k, x, A_RETURNED)], D_REVERSE) ->
						T_status[IX_status(S_CONFIRMED, k, x, A_RETURNED)] = T_status[IX_status(S_CONFIRMED, k, x, A_RETURNED)] - D_REVERSE
					:: else -> skip
					fi;
					x++
				:: else -> break
				od;
				T_return[IX_return(S_CONFIRMED, k, 1, 1)] = DEC(S_RETURNED, D_DEF)
			:: mutant == M_RETURN_UNMARKED ->
				x = 0;
				do
				:: x < 6 -> T_return[IX_return(x, k, 0, 1)] = T_return[IX_return(x, k, 1, 1)]; x++
				:: else -> break
				od
			:: else -> skip
			fi;
			k++
		:: else -> break
		od;
		k = 0; x = 0
	}
	atomic {
		run Clock(); run Bank(); run Payments(); run Statements();
		run Worker(0);
#if NW > 1
		run Worker(1);
#endif
		run Quiescent()
	}
}
#endif
