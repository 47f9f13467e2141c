#!/usr/bin/env python3
"""Writes the seed inputs of the VNF, tunnel and controller fuzz targets into
crates/{vnf,tunnel,control}/fuzz/seeds/<target>/ (docs/fuzzing.md): valid frames, state blobs,
TCP bursts, TSO/USO super-packets, sealed payloads, tunnel configurations, REST sessions, agent
state records and pid files, so that the fuzzer starts past
the checksum, header and blob checks instead of rediscovering them."""
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ip(a):
    return bytes(int(x) for x in a.split("."))


def ipv4(src, dst, proto, l4):
    """An IPv4 packet with valid IP, TCP, UDP and ICMP checksums."""
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), 1, 0x4000, 64, proto, 0, ip(src), ip(dst))
    hdr = hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:]
    pseudo = ip(src) + ip(dst) + struct.pack("!BBH", 0, proto, len(l4))
    if proto in (6, 17):
        off = 16 if proto == 6 else 6
        l4 = l4[:off] + struct.pack("!H", csum(pseudo + l4)) + l4[off + 2 :]
    elif proto == 1:
        l4 = l4[:2] + struct.pack("!H", csum(l4)) + l4[4:]
    return hdr + l4


def frame(src, dst, proto, l4):
    eth = b"\x02\0\0\0\0\x02" + b"\x02\0\0\0\0\x01" + b"\x08\x00"
    return eth + ipv4(src, dst, proto, l4)


def tcp(src, sp, dst, dp, seq, ack, flags, data=b""):
    l4 = struct.pack("!HHIIBBHHH", sp, dp, seq, ack, 5 << 4, flags, 65535, 0, 0) + data
    return frame(src, dst, 6, l4)


def udp(src, sp, dst, dp, data):
    return frame(src, dst, 17, struct.pack("!HHHH", sp, dp, 8 + len(data), 0) + data)


def icmp_echo(src, dst, ident, reply=False):
    return frame(src, dst, 1, struct.pack("!BBHHH", 0 if reply else 8, 0, 0, ident, 1) + b"ping")


def conversation(frames):
    """The chain target's input: per frame a control byte (bit 0 reverse, bits 1..7
    time step in 10 ms units) and a length byte, then the frame."""
    out = b""
    for rev, f in frames:
        out += bytes([(1 if rev else 0) | 2, len(f)]) + f
    return out


def write(crate, target, name, data):
    d = os.path.join(ROOT, "crates", crate, "fuzz", "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def blob(kind, rec_len, records):
    return b"NFXS" + bytes([1, kind]) + struct.pack("<HI", rec_len, len(records)) + b"".join(records)


def vnf_seeds():
    a, b, pub = "10.0.0.1", "10.0.1.2", "10.200.2.100"
    write("vnf", "chain", "tcp_handshake_http", conversation([
        (False, tcp(a, 40000, b, 5201, 1, 0, 0x02)),
        (True, tcp(b, 5201, pub, 40000, 9, 2, 0x12)),
        (False, tcp(a, 40000, b, 5201, 2, 10, 0x10)),
        (False, tcp(a, 40000, b, 5201, 2, 10, 0x18, b"GET / HTTP/1.1\r\nUser-Agent: x\r\n\r\n")),
        (False, tcp(a, 40000, b, 5201, 36, 10, 0x11)),
        (True, tcp(b, 5201, pub, 40000, 10, 37, 0x11)),
    ]))
    write("vnf", "chain", "udp_icmp_dpi", conversation([
        (False, udp(a, 5353, b, 53, b"NFX-DPI-TEST")),
        (True, udp(b, 53, pub, 40001, b"answer")),
        (False, icmp_echo(a, b, 7)),
        (True, icmp_echo(b, pub, 7, reply=True)),
        (False, udp(a, 5354, b, 53, b"\x16\x03\x01\x00\x10\x01NFX-DPI-DROP-TEST")),
    ]))
    # Firewall record (56 B): canonical key (src, dst, sport, dport, proto), state,
    # flags, 0, remaining ms, window scales x2, side flags x2, then per side end,
    # maxend, maxwin, maxack. TCP established is state 3, flags assured + seen reply
    # (0x0c), side flags MAXACK_SET (2); UDP new is 9, ICMP replied 10.
    win = struct.pack("<BBBB", 0, 0, 2, 2) + struct.pack(
        "<IIIIIIII", 1000, 1000 + 65535, 65535, 5000, 5000, 5000 + 65535, 65535, 1000)
    no_win = bytes(36)
    fw = [
        struct.pack("<IIHHBBBBI", 0x0A000001, 0x0A000102, 40000, 5201, 6, 3, 0x0C, 0, 60000) + win,
        struct.pack("<IIHHBBBBI", 0x0A000001, 0x0A000102, 5353, 53, 17, 9, 0, 0, 30000) + no_win,
        struct.pack("<IIHHBBBBI", 0x0A000001, 0x0A000102, 7, 7, 1, 10, 0x08, 0, 30000) + no_win,
    ]
    # NAT record: proto, flags, inside (addr, port), public, remote, remaining ms.
    nat = [
        struct.pack("<BBIHIHIHI", 6, 0, 0x0A000001, 40000, 0x0AC80264, 40000, 0x0A000102, 5201, 60000),
        struct.pack("<BBIHIHIHI", 17, 0, 0x0A000001, 5353, 0x0AC80264, 40001, 0x0A000102, 53, 30000),
        struct.pack("<BBIHIHIHI", 1, 0, 0x0A000001, 7, 0x0AC80264, 40002, 0x0A000102, 7, 30000),
        # A port forward (tcp 40010 -> 10.0.0.9:22), flags DNAT + replied.
        struct.pack("<BBIHIHIHI", 6, 6, 0x0A000009, 22, 0x0AC80264, 40010, 0xCB007109, 5555, 60000),
    ]
    # The state target's input: node selector (bits 0..1 node, 2..4 configuration),
    # cut between the first and second blob; the first blob holds two records.
    fwb, natb = blob(1, 56, fw), blob(2, 24, nat)
    two_fw = fwb[:8] + struct.pack("<I", 2) + fwb[12:12 + 112]
    write("vnf", "state_import", "firewall", bytes([0, len(two_fw)]) + two_fw + fwb)
    write("vnf", "state_import", "firewall_limits", bytes([4 << 2, len(two_fw)]) + two_fw + fwb)
    two_nat = natb[:8] + struct.pack("<I", 2) + natb[12:12 + 48]
    write("vnf", "state_import", "nat", bytes([1, len(two_nat)]) + two_nat + natb)
    # fw_nat: configuration byte, then a conversation with real sequence numbers
    # through firewall -> NAT: a handshake, data both ways, a blind RST, an ICMP
    # error about the flow, FIN both ways; then a mid-stream pickup (loose).
    conv = conversation([
        (False, tcp(a, 40000, b, 5201, 100, 0, 0x02)),
        (True, tcp(b, 5201, pub, 40000, 500, 101, 0x12)),
        (False, tcp(a, 40000, b, 5201, 101, 501, 0x10)),
        (False, tcp(a, 40000, b, 5201, 101, 501, 0x18, b"hello")),
        (True, tcp(b, 5201, pub, 40000, 501, 106, 0x18, b"world")),
        (True, tcp(b, 5201, pub, 40000, 9999999, 0, 0x04)),
        (True, icmp_error(b, pub, tcp(pub, 40000, b, 5201, 101, 501, 0x18, b"hello"))),
        (False, tcp(a, 40000, b, 5201, 106, 506, 0x11)),
        (True, tcp(b, 5201, pub, 40000, 506, 107, 0x11)),
        (False, tcp(a, 40000, b, 5201, 107, 507, 0x10)),
        (False, tcp(a, 40001, b, 80, 7000, 3000, 0x10)),
        (True, tcp(b, 80, pub, 40001, 3000, 7000, 0x10)),
        (False, udp(a, 5353, b, 53, b"q")),
        (True, udp(b, 53, pub, 5353, b"a")),
        (True, tcp("203.0.113.9", 5555, pub, 40010, 1, 0, 0x02)),
    ])
    write("vnf", "fw_nat", "handshake_strict", bytes([0]) + conv)
    write("vnf", "fw_nat", "handshake_loose_limits", bytes([7]) + conv)
    # configs: format byte (0 YAML, 1 JSON), then a chain entry.
    for name, fmt, text in [
        ("firewall", 0, "firewall: { default: deny, rules: [ {action: allow, proto: tcp, dport: 80} ], rules_file: rules.yaml, max_flows: 64, max_flows_per_source: 4, loose: true, timeouts: {unacknowledged: 60} }"),
        ("firewall_canary", 0, "firewall: { rules_file: canary.yaml }"),
        ("firewall_outside", 0, "firewall: { rules_file: out.yaml }"),
        ("nat", 0, "nat: { snat: { public_ip: 10.200.2.100, port_range: [40000, 40063] }, dnat: [ {proto: tcp, public_port: 8080, to_ip: 10.0.0.1} ], inside_networks: [10.0.0.0/8], max_flows_per_source: 4 }"),
        ("dpi", 0, "dpi: { patterns: patterns.txt, stream_flows: 16, event_table: 16 }"),
        ("dpi_canary", 1, '{"dpi": {"patterns": "canary.txt"}}'),
        ("dpi_passwd", 1, '{"dpi": {"patterns": "passwd"}}'),
        ("elephant", 1, '{"elephant": {"min_bytes": 1000, "max_flows": 16}}'),
    ]:
        write("vnf", "configs", name, bytes([fmt]) + text.encode())
    # patterns: the fuzz pattern set, and lines that carry the canary.
    with open(os.path.join(ROOT, "crates", "vnf", "fuzz", "patterns.txt"), "rb") as fh:
        write("vnf", "patterns", "set", fh.read())
    write("vnf", "patterns", "canary", b"NFXCANARY\talert\tliteral\tx\nok\tNFXCANARY\tliteral\tx\nr\talert\tregex\t(NFXCANARY\n")


def icmp_error(src, dst, quoted):
    """An ICMP port unreachable from src to dst quoting an Ethernet frame's packet."""
    ip_pkt = quoted[14:14 + 28]
    l4 = struct.pack("!BBHI", 3, 3, 0, 0) + ip_pkt
    return frame(src, dst, 1, l4)


def tcp_segment(seq, data, flags=0x10):
    """A TCP/IPv4 segment of one flow as the TUN carries it (no Ethernet header)."""
    return ipv4("10.9.0.1", "10.9.0.2", 6, struct.pack("!HHIIBBHHH", 40000, 5201, seq, 1, 5 << 4, flags, 65535, 0, 0) + data)


def vnet(flags, gso, hdr_len, gso_size, cs_start, cs_off):
    return struct.pack("<BBHHHH", flags, gso, hdr_len, gso_size, cs_start, cs_off)


def tunnel_seeds():
    # gro: 2-byte LE length + packet; 0xffff ends a batch.
    seg = 1000
    burst = [tcp_segment(1 + i * seg, bytes([i]) * seg) for i in range(4)]
    burst.append(tcp_segment(1 + 4 * seg, b"tail", flags=0x18))
    g = b"".join(struct.pack("<H", len(p)) + p for p in burst)
    write("tunnel", "gro", "burst", g + b"\xff\xff" + g)
    # segment: MTU byte (576 + 4 x byte), vnet header, packet.
    big = tcp_segment(1, bytes(range(256)) * 16)
    write("tunnel", "segment", "tso4", bytes([200]) + vnet(1, 1, 40, 1400, 20, 16) + big)
    udp = ipv4("10.9.0.1", "10.9.0.2", 17, struct.pack("!HHHH", 4000, 4001, 8 + 3000, 0) + b"u" * 3000)
    write("tunnel", "segment", "uso", bytes([200]) + vnet(1, 5, 28, 1200, 20, 6) + udp)
    write("tunnel", "segment", "csum", bytes([255]) + vnet(1, 0, 0, 0, 20, 16) + tcp_segment(1, b"data"))
    # esp_open: mode (bit 3: seal), then chunks (length byte, payload); payload is
    # inner packet, padding 1..n, pad length, next header 4.
    inner = tcp_segment(1, b"x" * 30)
    pad = (-(len(inner) + 2)) % 4
    payload = inner + bytes(range(1, pad + 1)) + bytes([pad, 4])
    for mode in (8, 9, 14):
        write("tunnel", "esp_open", "sealed_%d" % mode, bytes([mode, len(payload)]) + payload)
    # tunnel_config: the example endpoint configurations (the target's directory holds
    # their tunnel.psk and em.token).
    for name in ("edge", "cloud", "present"):
        with open(os.path.join(ROOT, "configs", "tunnel", name + ".yaml"), "rb") as fh:
            write("tunnel", "tunnel_config", name, fh.read())


def control_seeds():
    # rest_api: per request a selector byte (method bits 0..2, token bits 3..4, path index
    # bits 5..7 + low nibble of the next byte << 3; index 15 = the path leads the body up
    # to a newline), a 16-bit LE length, then the body.
    methods = {"GET": 0, "POST": 1, "DELETE": 2, "PUT": 3, "HEAD": 4}
    paths = ["/api/v1/plan", "/api/v1/services", "/api/v1/services/web", "/api/v1/instances",
             "/api/v1/instances/web-firewall-0", "/api/v1/instances/web-firewall-0/migrate",
             "/api/v1/operations", "/api/v1/operations/1", "/api/v1/energy", "/api/v1/dashboard",
             "/metrics", "/agent/v1/instances"]

    def call(method, token, path, body=b""):
        i = paths.index(path) if path in paths else 15
        if i == 15:
            body = path.encode() + b"\n" + body
        sel = methods[method] | (token << 3) | ((i & 7) << 5)
        return bytes([sel, i >> 3]) + struct.pack("<H", len(body)) + body

    svc = json.dumps({"id": "web", "tenant": "acme", "ingress": "edge", "egress": "cloud",
                      "chain": [{"function": "firewall", "config": {"rules": [{"action": "allow", "dport": 80}]}},
                                {"function": "nat", "config": {"snat": {"public_ip": "10.200.2.100"}}}],
                      "sla": {"max_latency_us": 500.0, "min_throughput_gbps": 1.0}}).encode()
    admin, read, wrong = 1, 2, 3
    sessions = {
        "deploy_list_destroy": [call("POST", admin, "/api/v1/services", svc), call("GET", read, "/api/v1/services"),
                                call("DELETE", read, "/api/v1/services/web"), call("GET", admin, "/api/v1/operations"),
                                call("DELETE", admin, "/api/v1/services/web")],
        "plan_read_token": [call("POST", read, "/api/v1/plan", svc), call("POST", read, "/api/v1/services", svc)],
        "migrate": [call("POST", admin, "/api/v1/services", svc),
                    call("POST", admin, "/api/v1/instances/web-firewall-0/migrate", b'{"device":"sw-cloud"}'),
                    call("GET", admin, "/api/v1/instances")],
        "agent_and_metrics": [call("POST", admin, "/agent/v1/instances", b'{"id":"a"}'), call("GET", 0, "/metrics"),
                              call("GET", admin, "/metrics"), call("GET", wrong, "/api/v1/energy")],
        "custom_path": [call("GET", admin, "/api/v1/services/../../etc/passwd"),
                        call("PUT", admin, "/agent/v1/instances/a/config", b"{}"), call("GET", admin, "/openapi.json")],
    }
    for name, calls in sessions.items():
        write("control", "rest_api", name, b"".join(calls))
    agent_seeds()


def agent_seeds():
    # agent_api: per request a selector byte (method bits 0..2, token bits 3..4: 0 none,
    # 1 right, 2 wrong, 3 right without "Bearer"; bit 5: body over the limit), a path byte
    # (index into the target's PATHS; past them the path leads the body up to a newline),
    # a 16-bit LE length, then the body.
    methods = {"GET": 0, "POST": 1, "PUT": 2, "DELETE": 3, "HEAD": 4, "PATCH": 5}
    paths = ["/metrics", "/agent/v1/health", "/agent/v1/energy", "/agent/v1/knobs",
             "/agent/v1/tunnels/web-esp-0/engine", "/agent/v1/paths", "/agent/v1/paths/web",
             "/agent/v1/instances", "/agent/v1/instances/web-firewall-0",
             "/agent/v1/instances/web-firewall-0/config", "/agent/v1/migrations",
             "/agent/v1/tunnels/web-esp-0/key", "/agent/v1/instances/web-firewall-0/flows"]

    def call(method, token, path, body=b"", big=False):
        i = paths.index(path) if path in paths else 255
        if i == 255:
            body = path.encode() + b"\n" + body
        sel = methods[method] | (token << 3) | (0x20 if big else 0)
        return bytes([sel, i]) + struct.pack("<H", len(body)) + body

    def j(v):
        return json.dumps(v).encode()

    sel = {"src": "10.9.1.2/32", "dst": "10.9.2.2/32", "proto": "udp", "dport": 5201}
    transit = {"selector": sel, "prev": "h0", "next": "h2"}
    ingress = {"selector": dict(sel, sport="1000-2000"), "next": "h2", "tunnel_next": "web-esp-0"}
    staged = {"selector": sel, "prev": "h0", "stages": ["sw0"], "instances": {"sw0": ["web-firewall-0"]}}
    spec = {"id": "web-firewall-0", "function": "firewall", "device": "sw0",
            "config": {"rules": [{"action": "allow", "dport": 80}]}, "throughput_gbps": 1.0, "capacity": 1.0}
    esp = {"id": "web-esp-0", "function": "esp", "device": "acc0",
           "config": {"tunnel": "web", "role": "initiator", "peer_host": "h2", "alg": "aes-gcm-128"}}
    flows = {"instance": "web-firewall-0", "function": "firewall", "bytes": 3, "data_b64": "AAAA"}
    ok, wrong, bare = 1, 2, 3
    sessions = {
        "paths": [call("PUT", ok, "/agent/v1/paths/web", j(transit)), call("GET", ok, "/agent/v1/paths"),
                  call("PUT", ok, "/agent/v1/paths", j({"web": ingress, "db": transit})),
                  call("PUT", ok, "/agent/v1/paths/web", j(transit)), call("DELETE", ok, "/agent/v1/paths/web"),
                  call("GET", ok, "/agent/v1/health")],
        "refused_paths": [call("PUT", ok, "/agent/v1/paths/web", j(staged)),
                          call("PUT", ok, "/agent/v1/paths/a b", j(transit)),
                          call("PUT", ok, "/agent/v1/paths", j({"web": dict(transit, next="h9")}))],
        "knobs_tunnels": [call("POST", ok, "/agent/v1/knobs", j({"device": "sw0", "setting": {"knob": "cpu_max", "value": 0.5}})),
                          call("POST", ok, "/agent/v1/knobs", j({"device": "sw0", "setting": {"knob": "affinity", "value": [0, 1]}})),
                          call("POST", ok, "/agent/v1/knobs", j({"device": "sw0", "setting": {"knob": "poll", "value": "busy"}})),
                          call("PUT", ok, "/agent/v1/tunnels/web-esp-0/key", j({"psk": "ab" * 32})),
                          call("POST", ok, "/agent/v1/instances", j(esp)),
                          call("POST", ok, "/agent/v1/tunnels/web-esp-0/engine", j({"lookaside": True}))],
        "instances": [call("POST", ok, "/agent/v1/instances", j(spec)), call("GET", ok, "/agent/v1/instances"),
                      call("GET", ok, "/agent/v1/instances/web-firewall-0"),
                      call("PUT", ok, "/agent/v1/instances/web-firewall-0/config", j({"rules": []})),
                      call("POST", ok, "/agent/v1/migrations", j({"old": "web-firewall-0", "new": "b", "flows": []})),
                      call("DELETE", ok, "/agent/v1/instances/web-firewall-0"),
                      call("GET", ok, "/agent/v1/energy"), call("GET", ok, "/metrics")],
        "flows": [call("GET", ok, "/agent/v1/instances/web-firewall-0/flows"),
                  call("PUT", ok, "/agent/v1/instances/web-firewall-0/flows", j(flows)),
                  call("POST", ok, "/agent/v1/instances", j(spec)),
                  call("PUT", ok, "/agent/v1/instances/web-firewall-0/flows", j(dict(flows, bytes=4))),
                  call("PUT", 0, "/agent/v1/instances/web-firewall-0/flows", j(flows)),
                  call("GET", wrong, "/agent/v1/instances/web-firewall-0/flows"),
                  call("PUT", ok, "/agent/v1/instances/web-firewall-0/flows", j(flows), big=True),
                  call("GET", ok, "/agent/v1/instances/other/flows")],
        "tokens_and_limits": [call("PUT", 0, "/agent/v1/paths", j({})), call("GET", wrong, "/metrics"),
                              call("GET", bare, "/agent/v1/health"), call("PATCH", ok, "/agent/v1/paths"),
                              call("PUT", ok, "/agent/v1/paths", b"{}", big=True),
                              call("GET", ok, "/agent/v1/../etc/passwd"), call("HEAD", ok, "/agent/v1/health")],
    }
    for name, calls in sessions.items():
        write("control", "agent_api", name, b"".join(calls))

    # agent_state: a kind byte (0: workers record, 1: agent config, 2: local agent
    # config), a flags byte (bit 0: seal the record with its hash), then the bytes.
    inst = lambda i, f: {"id": i, "function": f, "device": "sw0", "config": {}}
    workers = {"sw0": {"instances": [inst("fw", "firewall"), inst("nat", "nat")], "nodes": ["fw", "nat"],
                       "config_versions": [1, 3], "pid": None, "joined": 1,
                       "services": [{"id": "web", "selector": {"dst": "10.9.2.2/32", "dport": "5201"},
                                     "chain": ["fw", "nat"]}]},
               "sw1": {"instances": [], "nodes": [], "config_versions": [], "pid": 4194304, "handed_to": "sw0",
                       "moved": {"fw": {"flows": 3, "bytes": 120}}}}
    record = j({"seq": 2, "workers": workers})
    uneven = j({"seq": 3, "workers": {"sw0": dict(workers["sw0"], config_versions=[1])}})
    write("control", "agent_state", "newer_record", bytes([0, 1]) + record)
    write("control", "agent_state", "uneven_record", bytes([0, 1]) + uneven)
    write("control", "agent_state", "cut_record", bytes([0, 0]) + record[: len(record) // 2])
    agent = (b"host: h1\nlisten: 10.0.0.1:7000\ntoken_file: /etc/nfx/token\nrun_dir: /run/nfx\n"
             b"software: [{ id: sw0, cores: 2 }]\nneighbors: { h2: { iface: eth1, peer: 10.9.12.2 } }\n"
             b"allowed_dirs: [/etc/nfx/dpi]\npower: { idle_w: 6.2, max_w: 37.4 }\n"
             b"accelerators: [{ id: acc0, queue_pairs: 4, core: 1 }]\n")
    local = (b"run_dir: /run/nfx\nworkers:\n  sw0: { ports: { inside: { iface: v0 } }, fanout: 7, poll: busy,"
             b" ring_slots: 256, fast_path: 1024, allowed_dirs: [/etc/nfx], nice: -5 }\n")
    write("control", "agent_state", "agent_config", bytes([1, 0]) + agent)
    write("control", "agent_state", "local_config", bytes([2, 0]) + local)
    leftover_seeds()


def leftover_seeds():
    # leftover_pid: kind byte (bit 0: device), id, NUL, pid file, NUL, the process's
    # cmdline; the target's tunnel directory is /dev/shm/nfx-fuzz-leftovers-<its pid>, so
    # these name another directory's files: the fuzzer finds its own from the compares.
    def argv(*args):
        return b"".join(a.encode() + b"\0" for a in args)
    d = "/dev/shm/nfx-fuzz-leftovers-1"
    write("control", "leftover_pid", "endpoint", b"\0t1\0" + b"4242\n\0" +
          argv("/usr/bin/nfx", "tunnel", "--config", d + "/ends/t1/tunnel.yaml"))
    write("control", "leftover_pid", "device", b"\1qat0\0" + b"4243\0" +
          argv("nfx", "accel", "serve", "--queue-pairs", "4", "--socket", d + "/accel/qat0/device.sock", "--core", "1"))
    write("control", "leftover_pid", "names_the_dir", b"\0t1\0" + b"77\0" +
          argv("tail", "-f", d + "/ends/t1/tunnel.log"))


if __name__ == "__main__":
    vnf_seeds()
    tunnel_seeds()
    control_seeds()
