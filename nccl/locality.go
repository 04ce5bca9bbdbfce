package nccl

import (
	"strconv"
	"strings"
)

// RankRef names one rank of one communicator by the communicator's key
// (its commId, or where NCCL printed none, its size and order: Comm.Key).
// Connections logged before any communicator line have the key "".
type RankRef struct {
	Comm string
	Rank int
}

// HostIDs tells apart the hosts of a log's processes, one ID per summary.
// A host name alone is not enough: clusters name every node "ubuntu" or
// "localhost", and pasted logs replace names with "<cluster_name>". So
// processes of one name are split by the address they bootstrapped on
// (HostAddr: a process that printed none, among several addresses, stands
// alone), then by what cannot share a host: one rank of one communicator in
// two processes, or two ranks of one communicator on one GPU (the same bus
// ID). Processes left together share the ID: the host name, with "@addr"
// or "#n" where it had to be split.
func HostIDs(sums []Summary) []string {
	ids := make([]string, len(sums))
	byName := map[string][]int{}
	var names []string
	for i := range sums {
		h := sums[i].Host
		if _, ok := byName[h]; !ok {
			names = append(names, h)
		}
		byName[h] = append(byName[h], i)
	}
	for _, name := range names {
		idx := byName[name]
		addrs := map[string]bool{}
		for _, i := range idx {
			if a := sums[i].HostAddr; a != "" {
				addrs[a] = true
			}
		}
		for _, i := range idx {
			switch {
			case len(addrs) <= 1:
				ids[i] = name
			case sums[i].HostAddr != "":
				ids[i] = name + "@" + sums[i].HostAddr
			default:
				ids[i] = name + "#pid" + strconv.Itoa(sums[i].PID)
			}
		}
	}
	// Split the groups whose processes cannot share a host: each process
	// joins the first subgroup it does not conflict with.
	groups := map[string][][]int{}
	for i, id := range ids {
		subs := groups[id]
		placed := false
		for k, sub := range subs {
			ok := true
			for _, j := range sub {
				if cannotShareHost(&sums[i], &sums[j]) {
					ok = false
					break
				}
			}
			if ok {
				subs[k] = append(sub, i)
				if k > 0 {
					ids[i] = id + "#" + strconv.Itoa(k+1)
				}
				placed = true
				break
			}
		}
		if !placed {
			if len(subs) > 0 {
				ids[i] = id + "#" + strconv.Itoa(len(subs)+1)
			}
			subs = append(subs, []int{i})
		}
		groups[id] = subs
	}
	return ids
}

// cannotShareHost: the two processes drive the same rank of a
// communicator, or two ranks of one communicator on one GPU. A GPU is
// named by its bus ID (init lines; connection lines of NCCL 2.5 to 2.11),
// or by its device number where both processes drive several GPUs: then
// the numbers count the node's GPUs, not the one GPU CUDA_VISIBLE_DEVICES
// left a process, which every such process calls 0.
func cannotShareHost(a, b *Summary) bool {
	ranksA, gpusA := rankLayout(a)
	ranksB, gpusB := rankLayout(b)
	for r := range ranksB {
		if ranksA[r] {
			return true
		}
	}
	devices := len(gpusA.devices) > 1 && len(gpusB.devices) > 1
	for k, rank := range gpusB.byGPU {
		if other, ok := gpusA.byGPU[k]; ok && other != rank && (isBusID(k[1]) || devices) {
			return true
		}
	}
	return false
}

type gpuLayout struct {
	byGPU   map[[2]string]int // (comm key, GPU) → rank
	devices map[string]bool   // the GPUs the process drives
}

// rankLayout is the ranks a process drives in communicators it can name,
// and the GPU of each.
func rankLayout(s *Summary) (map[RankRef]bool, gpuLayout) {
	ranks := map[RankRef]bool{}
	g := gpuLayout{byGPU: map[[2]string]int{}, devices: map[string]bool{}}
	for _, r := range s.LocalRanks {
		if r.Comm != "" {
			ranks[r.RankRef] = true
		}
		if r.GPU != "" {
			g.byGPU[[2]string{r.Comm, r.GPU}] = r.Rank
			g.devices[r.GPU] = true
		}
	}
	for _, c := range s.Comms {
		if c.Key != "" && c.Rank >= 0 {
			ranks[RankRef{c.Key, c.Rank}] = true
			if c.PCIBusID != "" {
				g.byGPU[[2]string{c.Key, c.PCIBusID}] = c.Rank
			}
		}
	}
	return ranks, g
}

// isBusID is whether a GPU name is a bus ID, unique on a host: kernel
// form from init lines ("0000:1b:00.0"), or NCCL 2.5 to 2.11's connection
// lines ("1b000"), rather than a device number (2.4's cudaDev, 2.12+'s
// nvmlDev).
func isBusID(gpu string) bool {
	if strings.Count(gpu, ":") == 2 {
		return true
	}
	if len(gpu) < 4 {
		return false
	}
	return strings.Trim(strings.ToLower(gpu), "0123456789abcdef") == ""
}

// Locality says, for each summary, which ranks run on its host: those its
// host's processes drive, and those they reach over P2P or SHM. It is the
// IsLocal Fallbacks needs to find ranks of one node talking over the
// network, from nothing but the log.
func Locality(sums []Summary) []IsLocal {
	ids := HostIDs(sums)
	sets := map[string]map[RankRef]bool{}
	for i := range sums {
		set := sets[ids[i]]
		if set == nil {
			set = map[RankRef]bool{}
			sets[ids[i]] = set
		}
		for _, r := range sums[i].LocalRanks {
			set[r.RankRef] = true
		}
		for _, c := range sums[i].Comms {
			if c.Rank >= 0 {
				set[RankRef{c.Key, c.Rank}] = true
			}
		}
		for _, r := range sums[i].NodePeers {
			set[r] = true
		}
	}
	out := make([]IsLocal, len(sums))
	for i := range sums {
		set := sets[ids[i]]
		out[i] = func(comm string, rank int) bool { return set[RankRef{comm, rank}] }
	}
	return out
}
