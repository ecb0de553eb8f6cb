package source

import (
	"cmp"
	"slices"

	"github.com/settle/settle/intake"
)

// item is one fetched message with its decoded event, or the reason it
// cannot be one.
type item struct {
	msg Message
	ev  intake.Event
	err error
}

// decode decodes every message of a fetched batch once.
func decode(msgs []Message) []item {
	items := make([]item, len(msgs))
	for i, m := range msgs {
		items[i].msg = m
		items[i].ev, items[i].err = intake.DecodeEvent(m.Data)
	}
	return items
}

// messages returns the messages of items.
func messages(items []item) []Message {
	msgs := make([]Message, len(items))
	for i, it := range items {
		msgs[i] = it.msg
	}
	return msgs
}

// split divides items into at most n parts to be recorded at once, with
// no part under minPart items unless the batch is. Items that share a
// settlement_id are linked, and so are those that share an account_id when
// byAccount (intake checks funds); linked items always land in the same
// part in their order, so that two transactions never race for one
// settlement's receipt or one account's balance: the outcome of every
// event is the one a single transaction would have given. A message that
// is not an event shares nothing and goes anywhere. Components are dealt
// largest first to the emptiest part.
func split(items []item, n int, byAccount bool) [][]item {
	n = min(n, len(items)/minPart)
	if n <= 1 {
		return [][]item{items}
	}
	// Union-find over the items, joined through the first item seen with
	// each settlement_id and each account_id.
	parent := make([]int, len(items))
	for i := range parent {
		parent[i] = i
	}
	find := func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	union := func(a, b int) {
		if ra, rb := find(a), find(b); ra != rb {
			parent[max(ra, rb)] = min(ra, rb)
		}
	}
	bySettlement := make(map[string]int, len(items))
	accounts := make(map[string]int)
	for i, it := range items {
		if it.err != nil {
			continue
		}
		if j, ok := bySettlement[it.ev.SettlementID]; ok {
			union(i, j)
		} else {
			bySettlement[it.ev.SettlementID] = i
		}
		if !byAccount {
			continue
		}
		if j, ok := accounts[it.ev.AccountID]; ok {
			union(i, j)
		} else {
			accounts[it.ev.AccountID] = i
		}
	}
	// The components, each in stream order.
	comps := map[int][]int{}
	var roots []int
	for i := range items {
		r := find(i)
		if _, ok := comps[r]; !ok {
			roots = append(roots, r)
		}
		comps[r] = append(comps[r], i)
	}
	slices.SortStableFunc(roots, func(a, b int) int { return cmp.Compare(len(comps[b]), len(comps[a])) })
	idx := make([][]int, n)
	for _, r := range roots {
		small := 0
		for k := range idx {
			if len(idx[k]) < len(idx[small]) {
				small = k
			}
		}
		idx[small] = append(idx[small], comps[r]...)
	}
	parts := make([][]item, 0, n)
	for _, is := range idx {
		if len(is) == 0 {
			continue
		}
		slices.Sort(is) // stream order within the part
		p := make([]item, len(is))
		for k, i := range is {
			p[k] = items[i]
		}
		parts = append(parts, p)
	}
	return parts
}
