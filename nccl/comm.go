package nccl

import (
	"strconv"
	"strings"
)

// commState is one communicator of a process, from its Init START line to
// its Destroy or Abort COMPLETE.
type commState struct {
	seq        uint32
	ptr        string
	commID     string
	rank       int
	nRanks     int
	cudaDev    int
	nvmlDev    int
	busID      string // kernel form; "" when the line had none
	nNodes     int
	localRanks int
	complete   bool
	ended      bool
	initLine   uint64
	// sizeOrder is the communicator's order among the process's
	// communicators of its size, from 1; 0 when it has none.
	sizeOrder int
}

// maxCommSizes bounds the distinct communicator sizes counted for keys.
const maxCommSizes = 64

// commKey names a communicator the same way in every process of the job:
// NCCL's commId (2.18+), else its size and its order among the process's
// communicators of that size ("#16.1"), as every rank of a job creates its
// communicators in the same order. "" when neither is known.
func (p *procState) commKey(c *commState) string {
	if c.commID != "" {
		return c.commID
	}
	if c.sizeOrder == 0 {
		return ""
	}
	return "#" + strconv.Itoa(c.nRanks) + "." + strconv.Itoa(c.sizeOrder)
}

// comm handles the communicator lifecycle lines:
//
//	ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x.. - Init START
//	... - Init COMPLETE
//	comm 0x.. rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
//	comm 0x.. rank 0 nranks 2 cudaDev 0 busId 60 - Destroy COMPLETE   (or Abort COMPLETE)
func (p *procState) comm(m string, lineNo uint64) {
	body, event, _ := strings.Cut(m, " - ")
	kv := keyValues(body)
	ptr := kv["comm"]
	if !strings.HasPrefix(ptr, "0x") {
		return
	}
	event = strings.TrimSpace(event)
	switch {
	case strings.HasPrefix(event, "Init START"), strings.HasPrefix(event, "Init COMPLETE"):
		c := p.findComm(ptr)
		if c == nil || c.complete && strings.HasPrefix(event, "Init START") {
			c = p.newComm(ptr)
		}
		c.fill(kv)
		if c.sizeOrder == 0 && c.nRanks >= 0 && (len(p.bySize) < maxCommSizes || p.bySize[c.nRanks] > 0) {
			p.bySize[c.nRanks]++
			c.sizeOrder = p.bySize[c.nRanks]
		}
		if strings.HasPrefix(event, "Init COMPLETE") {
			c.complete = true
		}
		c.initLine = lineNo
		p.current = c
	case strings.HasPrefix(event, "Destroy COMPLETE"), strings.HasPrefix(event, "Abort COMPLETE"):
		if c := p.findComm(ptr); c != nil {
			c.ended = true
			if p.current == c {
				p.current = nil
			}
		}
	case event == "" && kv["nNodes"] != "":
		if c := p.findComm(ptr); c != nil {
			c.nNodes = atoiOr(kv["nNodes"], c.nNodes)
			c.localRanks = atoiOr(kv["localRanks"], c.localRanks)
		}
	}
}

// findComm returns the live communicator at ptr (NCCL reuses freed
// addresses, so an ended one is not a match).
func (p *procState) findComm(ptr string) *commState {
	for i := len(p.comms) - 1; i >= 0; i-- {
		c := p.comms[i]
		if c.ptr == ptr && !c.ended {
			return c
		}
	}
	return nil
}

func (p *procState) newComm(ptr string) *commState {
	p.commInits++
	p.commSeq++
	c := &commState{seq: p.commSeq, ptr: truncate(ptr, maxCommIDBytes), rank: -1, nRanks: -1, cudaDev: -1, nvmlDev: -1}
	if len(p.comms) >= MaxComms {
		// Forget an ended communicator first: churn (a new communicator per
		// step) is then still visible in commInits.
		drop := 0
		for i, old := range p.comms {
			if old.ended {
				drop = i
				break
			}
		}
		p.comms = append(p.comms[:drop], p.comms[drop+1:]...)
	}
	p.comms = append(p.comms, c)
	return c
}

func (c *commState) fill(kv map[string]string) {
	c.rank = atoiOr(kv["rank"], c.rank)
	if n, ok := kv["nranks"]; ok {
		c.nRanks = atoiOr(n, c.nRanks)
	} else {
		c.nRanks = atoiOr(kv["nRanks"], c.nRanks)
	}
	c.cudaDev = atoiOr(kv["cudaDev"], c.cudaDev)
	c.nvmlDev = atoiOr(kv["nvmlDev"], c.nvmlDev)
	if b, ok := ParseBusID(kv["busId"]); ok {
		c.busID = b
	}
	if id := kv["commId"]; strings.HasPrefix(id, "0x") {
		c.commID = truncate(id, maxCommIDBytes)
	}
}

// keyValues reads "key value key value ..." pairs; the first word (the
// calling function's name) may stand alone.
func keyValues(s string) map[string]string {
	f := strings.Fields(s)
	kv := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i++ {
		switch f[i] {
		case "comm", "rank", "nranks", "nRanks", "cudaDev", "nvmlDev", "busId", "commId", "nNodes", "localRanks":
			kv[f[i]] = f[i+1]
			i++
		}
	}
	return kv
}

func atoiOr(s string, def int) int {
	if n, ok := atoiPositive([]byte(s)); ok {
		return n
	}
	return def
}
