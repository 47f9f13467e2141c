#!/bin/bash
# Offload on/off A/B: two namespaces, one veth, two nfx tunnel endpoints, iperf3 3 s.
NFX=${NFX:-$(dirname "$0")/../../../target/release/nfx}
A=espab-a; B=espab-b; D=/tmp/espab
cleanup() { kill $P1 $P2 $S 2>/dev/null; wait 2>/dev/null; ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
trap cleanup EXIT
mkdir -p $D
run() {
  off=$1
  cleanup
  ip netns add $A; ip netns add $B
  ip -n $A link set lo up; ip -n $B link set lo up
  ip -n $A link add va type veth peer name vb netns $B
  ip -n $A addr add 10.233.0.1/24 dev va; ip -n $A link set va up
  ip -n $B addr add 10.233.0.2/24 dev vb; ip -n $B link set vb up
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > $D/em-token; chmod 600 $D/em-token
  AUTH="Authorization: Bearer $(cat $D/em-token)"
  for s in 1 2; do
    if [ $s = 1 ]; then ns=$A; p=2; o=0x1001; i=0x1002; ok=0x00112233445566778899aabbccddeeff01020304; ik=0xffeeddccbbaa99887766554433221100a0b0c0d0
    else ns=$B; p=1; o=0x1002; i=0x1001; ik=0x00112233445566778899aabbccddeeff01020304; ok=0xffeeddccbbaa99887766554433221100a0b0c0d0; fi
    cat > $D/t$s.yaml <<Y
name: ab$s
netns: $ns
em_listen: '127.0.0.1:2973$s'
em_token_file: em-token
engine: cpu
alg: aes-128-gcm
offload: $off
tun: {name: espab, address: 192.168.233.$s/24}
underlay: {local: '10.233.0.$s:4500', peer: '10.233.0.$p:4500'}
insecure_static_keys: true
seq_state: t$s.seq
outbound: {spi: $o, key: '$ok'}
inbound: {spi: $i, key: '$ik'}
Y
  done
  $NFX tunnel --config $D/t1.yaml --duration 30 > /dev/null & P1=$!
  $NFX tunnel --config $D/t2.yaml --duration 30 > /dev/null & P2=$!
  for port in 29731 29732; do
    for k in $(seq 100); do curl -s -H "$AUTH" 127.0.0.1:$port/status | grep -q '"ready":true' && break; sleep 0.1; done
  done
  ip netns exec $B iperf3 -s -1 -B 192.168.233.2 > /dev/null & S=$!
  sleep 0.5
  ip netns exec $A iperf3 -c 192.168.233.2 -t 3 -J | python3 -c 'import json,sys; j=json.load(sys.stdin); print("offload='$off'", round(j["end"]["sum_received"]["bits_per_second"]/1e9,3), "Gbit/s")'
  curl -s -H "$AUTH" 127.0.0.1:29732/status | python3 -c 'import json,sys; j=json.load(sys.stdin); print("  rx", j["rx_packets"], "offload", j["offload"])'
}
uptime
run false; run true; run false; run true
