// The ring all-reduce inside ns-3, for bench/ns3ring.py (compiled by cppyy's cling
// when the benchmark loads it: the per-packet work stays in C++, as the emulator's
// stays in C, so the two are compared at the speed each can reach).
//
// Rank p sends its ring steps to rank p+1. Step s+1 is the chunk that came from
// rank p-1 at step s (reduced or gathered), so it is sent only once that chunk
// has wholly arrived: the same dependencies as traffic/collectives.py's ring DAG.
// A step leaves the NIC its per-message overhead after it was released, as the
// model's NIC overhead says. Over UDP a rank paces its packets at its NIC's line
// rate (one event per packet, as the emulator's NIC model paces frames), each padded
// so that its wire bytes are a RoCEv2 frame's; over TCP it appends the chunk to its
// connection's stream and lets ns-3's TCP pace it.
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <cstdint>
#include <map>
#include <vector>

namespace fabricemu_ns3
{

class Ring
{
  public:
    // pad_bytes: UDP only, added to each packet's payload (not counted as delivered);
    // wire_bytes: what a packet of P payload bytes takes on the wire, less P.
    Ring(uint32_t steps, uint64_t chunk_bytes, uint32_t payload_bytes, uint32_t pad_bytes,
         uint32_t wire_bytes, double nic_overhead_s, bool tcp)
        : m_steps(steps),
          m_chunk(chunk_bytes),
          m_payload(payload_bytes),
          m_pad(tcp ? 0 : pad_bytes),
          m_wire(wire_bytes),
          m_nic_overhead(ns3::Seconds(nic_overhead_s)),
          m_tcp(tcp)
    {
    }

    // Ranks in ring order: their node, the address their predecessor sends to, and
    // their NIC's line rate (bit/s).
    void AddRank(ns3::Ptr<ns3::Node> node, ns3::Ipv4Address address, double nic_bps)
    {
        Rank r;
        r.node = node;
        r.address = address;
        r.ns_per_bit = 1e9 / nic_bps;
        m_ranks.push_back(r);
    }

    void Start(uint16_t port)
    {
        ns3::TypeId factory = m_tcp ? ns3::TcpSocketFactory::GetTypeId()
                                    : ns3::UdpSocketFactory::GetTypeId();
        uint32_t n = m_ranks.size();
        for (uint32_t p = 0; p < n; p++)
        {
            Rank& r = m_ranks[p];
            r.rx = ns3::Socket::CreateSocket(r.node, factory);
            r.rx->Bind(ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), port));
            if (m_tcp)
            {
                r.rx->Listen();
                r.rx->SetAcceptCallback(
                    ns3::MakeNullCallback<bool, ns3::Ptr<ns3::Socket>, const ns3::Address&>(),
                    ns3::MakeCallback(&Ring::Accepted, this));
            }
            else
            {
                r.rx->SetRecvCallback(ns3::MakeCallback(&Ring::Received, this));
            }
            m_rank_of[ns3::PeekPointer(r.node)] = p;
        }
        for (uint32_t p = 0; p < n; p++)
        {
            m_ranks[p].tx = ns3::Socket::CreateSocket(m_ranks[p].node, factory);
            ns3::Simulator::ScheduleNow(&Ring::Open, this, p, port);
        }
    }

    uint32_t RanksDone() const { return m_done; }
    double LastDoneS() const { return m_last_done_s; }
    uint64_t DeliveredBytes() const { return m_delivered; }
    uint64_t PacketsSent() const { return m_packets; }

  private:
    struct Rank
    {
        ns3::Ptr<ns3::Node> node;
        ns3::Ipv4Address address;
        double ns_per_bit = 0;
        ns3::Ptr<ns3::Socket> tx, rx;
        uint32_t released = 0;   // steps handed to the transport
        uint64_t received = 0;   // bytes that came from the predecessor
        uint64_t left = 0;       // UDP: bytes of the current step not yet sent
        bool pacing = false;     // UDP: a packet event is pending
    };

    // Inside the run: a TCP connect sends its SYN at once.
    void Open(uint32_t p, uint16_t port)
    {
        Rank& r = m_ranks[p];
        r.tx->Bind();
        r.tx->Connect(ns3::InetSocketAddress(m_ranks[(p + 1) % m_ranks.size()].address, port));
        Release(p);
    }

    uint32_t Allowed(const Rank& r) const
    {
        uint64_t arrived = r.received / m_chunk;
        return arrived + 1 < m_steps ? arrived + 1 : m_steps;
    }

    // Hand the transport every step whose chunk has arrived.
    void Release(uint32_t p)
    {
        Rank& r = m_ranks[p];
        if (m_tcp)
        {
            for (; r.released < Allowed(r); r.released++)
            {
                ns3::Simulator::Schedule(m_nic_overhead, &Ring::Append, this, p);
            }
        }
        else if (!r.pacing)
        {
            SendNext(p);
        }
    }

    void Append(uint32_t p)
    {
        m_ranks[p].tx->Send(ns3::Create<ns3::Packet>(m_chunk));
    }

    // UDP: one packet now, the next one a packet's wire time later.
    void SendNext(uint32_t p)
    {
        Rank& r = m_ranks[p];
        if (r.left == 0)
        {
            if (r.released >= Allowed(r))
            {
                r.pacing = false;
                return;
            }
            r.released++;
            r.left = m_chunk;
            r.pacing = true;
            ns3::Simulator::Schedule(m_nic_overhead, &Ring::SendNext, this, p);
            return;
        }
        uint32_t size = r.left < m_payload ? r.left : m_payload;
        r.tx->Send(ns3::Create<ns3::Packet>(size + m_pad));
        m_packets++;
        r.left -= size;
        r.pacing = true;
        ns3::Simulator::Schedule(ns3::NanoSeconds((size + m_wire) * 8 * r.ns_per_bit),
                                 &Ring::SendNext, this, p);
    }

    void Accepted(ns3::Ptr<ns3::Socket> s, const ns3::Address&)
    {
        s->SetRecvCallback(ns3::MakeCallback(&Ring::Received, this));
    }

    void Received(ns3::Ptr<ns3::Socket> s)
    {
        uint32_t p = m_rank_of[ns3::PeekPointer(s->GetNode())];
        Rank& r = m_ranks[p];
        uint64_t whole = uint64_t(m_steps) * m_chunk;
        bool was_done = r.received >= whole;
        ns3::Ptr<ns3::Packet> packet;
        while ((packet = s->Recv()))
        {
            r.received += packet->GetSize() - m_pad;
            m_delivered += packet->GetSize() - m_pad;
        }
        if (!was_done && r.received >= whole)
        {
            m_done++;
            m_last_done_s = ns3::Simulator::Now().GetSeconds();
            if (m_done == m_ranks.size())
            {
                ns3::Simulator::Stop();
            }
        }
        // The step that waited for this chunk (a rank's last step waits for nothing).
        Release(p);
    }

    uint32_t m_steps;
    uint64_t m_chunk;
    uint32_t m_payload, m_pad, m_wire;
    ns3::Time m_nic_overhead;
    bool m_tcp;
    std::vector<Rank> m_ranks;
    std::map<ns3::Node*, uint32_t> m_rank_of;
    uint32_t m_done = 0;
    double m_last_done_s = 0;
    uint64_t m_delivered = 0, m_packets = 0;
};

} // namespace fabricemu_ns3
