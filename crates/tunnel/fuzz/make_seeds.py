#!/usr/bin/env python3
"""Writes the seed inputs of the tunnel fuzz targets into seeds/<target>/: an in-order
TCP burst for the coalescer, TSO/USO super-packets with their vnet headers for the
segmentation, and sealed payloads for the ESP receive side, so that the fuzzer starts
past the checksum and header checks instead of rediscovering them."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ipv4(proto, l4, ident=1):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident, 0x4000, 64, proto, 0,
                      bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]))
    return hdr[:10] + struct.pack("!H", csum(hdr)) + hdr[12:] + l4


def tcp(seq, data, flags=0x10):
    return ipv4(6, struct.pack("!HHIIBBHHH", 40000, 5201, seq, 1, 5 << 4, flags, 65535, 0, 0) + data)


def write(target, name, data):
    d = os.path.join(HERE, "seeds", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as fh:
        fh.write(data)


def vnet(flags, gso, hdr_len, gso_size, cs_start, cs_off):
    return struct.pack("<BBHHHH", flags, gso, hdr_len, gso_size, cs_start, cs_off)


def main():
    # gro: 2-byte LE length + packet; 0xffff ends a batch.
    seg = 1000
    burst = [tcp(1 + i * seg, bytes([i]) * seg) for i in range(4)]
    burst.append(tcp(1 + 4 * seg, b"tail", flags=0x18))
    g = b"".join(struct.pack("<H", len(p)) + p for p in burst)
    write("gro", "burst", g + b"\xff\xff" + g)
    # segment: MTU byte (576 + 4 x byte), vnet header, packet.
    big = tcp(1, bytes(range(256)) * 16)
    write("segment", "tso4", bytes([200]) + vnet(1, 1, 40, 1400, 20, 16) + big)
    udp = ipv4(17, struct.pack("!HHHH", 4000, 4001, 8 + 3000, 0) + b"u" * 3000)
    write("segment", "uso", bytes([200]) + vnet(1, 5, 28, 1200, 20, 6) + udp)
    write("segment", "csum", bytes([255]) + vnet(1, 0, 0, 0, 20, 16) + tcp(1, b"data"))
    # esp_open: mode (bit 3: seal), then chunks (length byte, payload); payload is
    # inner packet, padding 1..n, pad length, next header 4.
    inner = tcp(1, b"x" * 30)
    pad = (-(len(inner) + 2)) % 4
    payload = inner + bytes(range(1, pad + 1)) + bytes([pad, 4])
    for mode in (8, 9, 14):
        write("esp_open", "sealed_%d" % mode, bytes([mode, len(payload)]) + payload)


if __name__ == "__main__":
    main()
