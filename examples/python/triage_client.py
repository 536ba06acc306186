#!/usr/bin/env python3
"""A scripted tinycode client over gRPC (grpcio), with no tinycode code.

It creates a ticket, follows it with Tickets.Watch while the daemon's
background triage worker triages it, approves the escalation the triage asks
for (Approvals.Decide), and prints the triaged ticket as one JSON line.

    pip install grpcio grpcio-tools
    python3 examples/python/triage_client.py            # socket from `tinycode daemon status`
    python3 examples/python/triage_client.py --socket /run/user/1000/tinycode/….sock

Stubs are generated from proto/ with grpcio-tools on first use (into
--gen-dir). The daemon must have `autoTriage.enabled` (the demo desk has it),
or the script asks for the triage itself with --enqueue.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


def generate_stubs(gen_dir):
    """Compile proto/tinycode/v1/*.proto into gen_dir (once per change)."""
    from grpc_tools import protoc
    import grpc_tools

    protos = sorted(
        os.path.join("tinycode", "v1", f)
        for f in os.listdir(os.path.join(PROTO_ROOT, "tinycode", "v1"))
        if f.endswith(".proto")
    )
    newest = max(os.path.getmtime(os.path.join(PROTO_ROOT, p)) for p in protos)
    stamp = os.path.join(gen_dir, ".stamp")
    if os.path.exists(stamp) and os.path.getmtime(stamp) >= newest:
        return
    os.makedirs(gen_dir, exist_ok=True)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{well_known}",
            f"--python_out={gen_dir}", f"--grpc_python_out={gen_dir}", *protos]
    if protoc.main(args) != 0:
        sys.exit("grpcio-tools could not compile the protocol in " + PROTO_ROOT)
    with open(stamp, "w"):
        pass


def default_socket():
    out = subprocess.run(["tinycode", "--json", "daemon", "status"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["socketPath"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", help="tinycoded's Unix socket")
    ap.add_argument("--gen-dir", default=os.path.join(HERE, "gen"))
    ap.add_argument("--enqueue", action="store_true",
                    help="ask for the triage (when autoTriage is off)")
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()

    generate_stubs(args.gen_dir)
    sys.path.insert(0, args.gen_dir)
    import grpc
    from tinycode.v1 import (approvals_pb2, approvals_pb2_grpc, approval_events_pb2,
                             tickets_pb2, tickets_pb2_grpc, triage_pb2, triage_pb2_grpc)

    socket = args.socket or default_socket()
    # h2 refuses a socket path as :authority (hyperium/h2#487): name a host.
    channel = grpc.insecure_channel(f"unix:{socket}",
                                    options=[("grpc.default_authority", "localhost")])
    meta = [("x-tinycode-client", "python-example")]
    tickets = tickets_pb2_grpc.TicketsStub(channel)
    triage = triage_pb2_grpc.TriageStub(channel)
    approvals = approvals_pb2_grpc.ApprovalsStub(channel)
    deadline = time.monotonic() + args.timeout

    ticket = tickets.Create(tickets_pb2.CreateTicketRequest(
        subject="投诉：企业账户被风控冻结",
        customer="Example Corp（企业客户）",
        channel="phone",
        body="我们的企业账户今天早上被风控冻结，影响了结算，请立刻处理。",
    ), metadata=meta)
    print(json.dumps({"created": ticket.id}), flush=True)
    if args.enqueue:
        triage.Enqueue(triage_pb2.EnqueueTriageRequest(ticket_ids=[ticket.id]), metadata=meta)

    approved = None
    changes = tickets.Watch(tickets_pb2.WatchTicketsRequest(id=ticket.id),
                            metadata=meta, timeout=args.timeout)
    for change in changes:
        kind = change.event.WhichOneof("payload")
        t = change.ticket
        print(json.dumps({"event": kind, "status": t.status}), flush=True)
        if kind == "ticket_classified" and approved is None:
            # The triage turn asks before escalating: find the approval.
            while time.monotonic() < deadline:
                status = triage.GetStatus(
                    triage_pb2.TriageStatusRequest(ticket_ids=[ticket.id]), metadata=meta)
                item = status.items[0] if status.items else None
                if item and item.approval_ids:
                    approved = item.approval_ids[0]
                    approvals.Decide(approvals_pb2.DecideApprovalRequest(
                        approval_id=approved,
                        decision=approval_events_pb2.APPROVAL_DECISION_ALLOW_ONCE,
                        reason="approved by the example script"), metadata=meta)
                    print(json.dumps({"approved": approved}), flush=True)
                    break
                if item and item.state in (triage_pb2.TRIAGE_STATE_DONE,
                                           triage_pb2.TRIAGE_STATE_FAILED):
                    approved = ""  # nothing asked
                    break
                time.sleep(0.05)
        if kind == "ticket_routed":
            print(json.dumps({
                "ticket": t.id, "category": t.category, "priority": t.priority,
                "queue": t.queue, "escalateLevel": t.escalate_level, "status": t.status,
                "approval": approved,
            }, ensure_ascii=False), flush=True)
            changes.cancel()
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
