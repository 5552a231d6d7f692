#!/bin/sh
# KubeBYON join script for cluster @cluster_name@, made for one join attempt.
#
# It checks this machine first and stops with a clear message when a check
# fails, then joins the cluster: with kubeadm's token discovery (Kamaji
# control planes), or through the control plane's private-node join endpoint
# (vCluster). Every step is reported to the platform, where the console shows it.
#
# Usage: curl -sS -H 'Authorization: Bearer <token>' <join url> | sudo sh [-s -- --force-join]
#   --force-join   leave the cluster this machine's kubelet is joined to, and
#                  join this one instead
#
# KUBEBYON_JOIN_ROOT (optional) is prefixed to every file the checks read; it
# lets the script be tested in a sandbox directory.
set -u

KB_CLUSTER=@cluster_name@
KB_TOKEN=@token@
KB_ATTEMPT=@attempt_id@
KB_REPORT_URL=@report_url@
KB_ENDPOINT=@endpoint@
KB_CA_PEM=@ca_pem@
KB_MAX_SKEW=@max_clock_skew@
KB_JOIN_METHOD=@join_method@
KB_CA_HASH=@ca_hash@
KB_KUBERNETES=@kubernetes_version@
# The server this machine dials and its kubelet names once joined: the
# endpoint, or the address the control plane advertises to its nodes
# (kubeadm's cluster-info), which may not be the one people use.
KB_KUBELET_SERVER=@kubelet_server@
[ -n "$KB_KUBELET_SERVER" ] || KB_KUBELET_SERVER=$KB_ENDPOINT
KB_ROOT="${KUBEBYON_JOIN_ROOT:-}"
KB_FORCE_JOIN=0

for arg in "$@"; do
    case "$arg" in
        --force-join) KB_FORCE_JOIN=1 ;;
        *) printf 'kubebyon-join: unknown option %s (only --force-join is known)\n' "$arg" >&2; exit 2 ;;
    esac
done

# A private directory, or nothing: never a predictable path in /tmp.
KB_TMP=$(mktemp -d 2>/dev/null) && [ -d "$KB_TMP" ] \
    || { printf 'kubebyon-join: cannot make a private temporary directory (mktemp -d)\n' >&2; exit 1; }
chmod 700 "$KB_TMP"
trap 'rm -rf "$KB_TMP"' EXIT
umask 077
printf 'Authorization: Bearer %s\n' "$KB_TOKEN" > "$KB_TMP/auth"
KB_CA_OPT=""
if [ -n "$KB_CA_PEM" ]; then
    printf '%s\n' "$KB_CA_PEM" > "$KB_TMP/ca.crt"
    KB_CA_OPT="--cacert $KB_TMP/ca.crt"
fi
KB_HOSTNAME=$(uname -n 2>/dev/null | tr '[:upper:]' '[:lower:]')

say() { printf '%s\n' "$*"; }

# json_text TEXT MAX: TEXT safe inside a JSON string (no quotes, backslashes
# or control characters), at most MAX bytes.
# shellcheck disable=SC1003
json_text() { printf '%s' "$1" | tr -d '\000-\037"\\' | cut -c1-"$2"; }

# json_params KEY=VALUE...: a JSON object of text values.
json_params() {
    kb_params=""
    for kb_pair in "$@"; do
        kb_params="$kb_params${kb_params:+,}\"${kb_pair%%=*}\":\"$(json_text "${kb_pair#*=}" 300)\""
    done
    printf '{%s}' "$kb_params"
}

# report STEP STATUS CODE DETAIL [KEY=VALUE...]: posts one step. What it
# found goes as a code with parameters, which the console words in its
# reader's language, and as English text. The response lands in
# $KB_TMP/response.
report() {
    kb_step=$1 kb_status=$2 kb_code=$3 kb_detail=$4
    shift 4
    body=$(printf '{"attempt_id":"%s","step":"%s","status":"%s","code":"%s","params":%s,"detail":"%s","hostname":"%s"}' \
        "$KB_ATTEMPT" "$kb_step" "$kb_status" "$kb_code" "$(json_params "$@")" \
        "$(json_text "$kb_detail" 900)" "$(json_text "$KB_HOSTNAME" 253)")
    curl -sS -m 15 -o "$KB_TMP/response" -w '%{http_code}' -X POST \
        -H @"$KB_TMP/auth" -H 'Content-Type: application/json' \
        --data "$body" "$KB_REPORT_URL" 2>"$KB_TMP/report.err"
}

# A reply's "message", for a refusal.
reply_message() { sed -n 's/.*"message":"\([^"]*\)".*/\1/p' "$KB_TMP/response" 2>/dev/null; }

# ok|warn|skip|fail STEP CODE DETAIL [KEY=VALUE...]: reports the step and
# prints its detail; fail then stops.
ok() { kb_s=$1; shift; report "$kb_s" ok "$@" >/dev/null || true; say "  ok    $kb_s: $2"; }
warn() { kb_s=$1; shift; report "$kb_s" warning "$@" >/dev/null || true; say "  warn  $kb_s: $2"; }
skip() { kb_s=$1; shift; report "$kb_s" skipped "$@" >/dev/null || true; say "  skip  $kb_s: $2"; }
fail() {
    kb_s=$1; shift
    report "$kb_s" failed "$@" >/dev/null || true
    say "  FAIL  $kb_s: $2" >&2
    say "kubebyon-join: this machine did not join $KB_CLUSTER: $2" >&2
    exit 1
}

say "Joining this machine ($KB_HOSTNAME) to KubeBYON cluster $KB_CLUSTER"

# The platform must hear us, or nothing of this join would be visible.
command -v curl >/dev/null 2>&1 || { say "kubebyon-join: curl is required" >&2; exit 1; }
code=$(report os running os_checking "checking the operating system")
case "$code" in
    2??) ;;
    *) say "kubebyon-join: the platform refused this join ($code): $(reply_message)$(cat "$KB_TMP/report.err" 2>/dev/null)" >&2; exit 1 ;;
esac
KB_SERVER_EPOCH=$(sed -n 's/.*"server_epoch":\([0-9]*\).*/\1/p' "$KB_TMP/response")

# Operating system and architecture -------------------------------------------
kernel=$(uname -s)
[ "$kernel" = Linux ] || fail os os_not_linux "Linux is required; this machine runs $kernel" "kernel=$kernel"
pretty="Linux"
if [ -r "$KB_ROOT/etc/os-release" ]; then
    pretty=$(sed -n 's/^PRETTY_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$KB_ROOT/etc/os-release")
fi
release=$(uname -r)
ok os os "${pretty:-Linux} (kernel $release)" "name=${pretty:-Linux}" "kernel=$release"

machine=$(uname -m)
case "$machine" in
    x86_64 | amd64) ok arch arch amd64 arch=amd64 ;;
    aarch64 | arm64) ok arch arch arm64 arch=arm64 ;;
    *) fail arch arch_unsupported "amd64 or arm64 is required; this machine is $machine" "arch=$machine" ;;
esac

[ "$(id -u)" = 0 ] || fail root root_required "run the join command as root (it ends with | sudo sh)"
ok root root "running as root"

# Control groups: kubelet needs the cpu and memory controllers -----------------
if [ -r "$KB_ROOT/sys/fs/cgroup/cgroup.controllers" ]; then
    controllers=$(cat "$KB_ROOT/sys/fs/cgroup/cgroup.controllers")
    for c in cpu memory; do
        case " $controllers " in
            *" $c "*) ;;
            *) fail cgroups cgroup_controller_missing "the $c cgroup controller is not enabled (cgroup v2 controllers: $controllers)" \
                "controller=$c" "controllers=$controllers" ;;
        esac
    done
    ok cgroups cgroup_v2 "cgroup v2 with cpu and memory"
elif [ -r "$KB_ROOT/proc/cgroups" ]; then
    memory=$(awk '$1 == "memory" { print $4 }' "$KB_ROOT/proc/cgroups")
    [ "$memory" = 1 ] || fail cgroups cgroup_memory_disabled "the memory cgroup is disabled; add cgroup_enable=memory to the kernel command line and reboot"
    ok cgroups cgroup_v1 "cgroup v1 with memory"
else
    fail cgroups cgroup_missing "no cgroup filesystem found under /sys/fs/cgroup"
fi

# Swap: kubelet refuses to start with swap on by default -----------------------
swaps=0
[ -r "$KB_ROOT/proc/swaps" ] && swaps=$(awk 'NR > 1' "$KB_ROOT/proc/swaps" | wc -l | tr -d ' ')
[ "$swaps" = 0 ] || fail swap swap_on "swap is on ($swaps device(s)); turn it off with 'swapoff -a' and remove it from /etc/fstab" "devices=$swaps"
ok swap swap_off off

# A kubelet already joined somewhere ------------------------------------------
if [ -r "$KB_ROOT/etc/kubernetes/kubelet.conf" ]; then
    joined=$(sed -n 's/^ *server: *//p' "$KB_ROOT/etc/kubernetes/kubelet.conf" | head -n 1)
    if [ "$joined" = "$KB_ENDPOINT" ] || [ "$joined" = "$KB_KUBELET_SERVER" ]; then
        ok existing_kubelet already_node "this machine is already a node of $KB_CLUSTER" "cluster=$KB_CLUSTER"
        report done ok already_joined "already joined" >/dev/null || true
        say "Nothing to do: this machine is already a node of $KB_CLUSTER."
        exit 0
    elif [ "$KB_FORCE_JOIN" = 1 ]; then
        warn existing_kubelet leaving_cluster "leaving the cluster at ${joined:-an unknown server} (--force-join)" "server=$joined"
    else
        fail existing_kubelet joined_elsewhere \
            "this machine is joined to ${joined:-another cluster}; to leave it and join $KB_CLUSTER, run the command again with: | sudo sh -s -- --force-join" \
            "server=$joined" "cluster=$KB_CLUSTER"
    fi
else
    ok existing_kubelet no_kubelet "no kubelet is joined here"
fi

# Ports the node's components listen on ---------------------------------------
listening=$(cat "$KB_ROOT/proc/net/tcp" "$KB_ROOT/proc/net/tcp6" 2>/dev/null \
    | awk '$4 == "0A" { split($2, a, ":"); print a[length(a)] }')
busy=""
for pair in 280A:10250:kubelet 2810:10256:kube-proxy; do
    hex=${pair%%:*}; rest=${pair#*:}
    if printf '%s\n' "$listening" | grep -qx "$hex"; then
        [ "$KB_FORCE_JOIN" = 1 ] || busy="$busy ${rest%%:*} (${rest#*:})"
    fi
done
[ -z "$busy" ] || fail ports ports_busy "already in use:$busy; stop what listens there or use another machine" "ports=${busy# }"
ok ports ports_free "10250 and 10256 are free"

# kubeadm and the kubelet, which a kubeadm join needs installed -----------------
if [ "$KB_JOIN_METHOD" = kubeadm ]; then
    missing=""
    for tool in kubeadm kubelet; do
        command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
    done
    [ -z "$missing" ] || fail kubeadm kubeadm_missing \
        "not installed:$missing; install kubeadm, kubelet and containerd for Kubernetes $KB_KUBERNETES (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/), then run the command again" \
        "missing=${missing# }" "version=$KB_KUBERNETES"
    version=$(kubeadm version -o short 2>/dev/null)
    ok kubeadm kubeadm_found "kubeadm ${version:-of an unknown version}" "version=${version:-unknown}"
fi

# Clock -----------------------------------------------------------------------
if [ -n "$KB_SERVER_EPOCH" ]; then
    now=$(date +%s)
    skew=$((now - KB_SERVER_EPOCH))
    [ "$skew" -lt 0 ] && skew=$((0 - skew))
    [ "$skew" -le "$KB_MAX_SKEW" ] || fail clock clock_skewed "this machine's clock is ${skew}s off the platform's (at most ${KB_MAX_SKEW}s); enable NTP (timedatectl set-ntp true)" \
        "seconds=$skew" "max=$KB_MAX_SKEW"
    ok clock clock_in_sync "within ${skew}s of the platform" "seconds=$skew"
else
    warn clock clock_unknown "the platform did not send its time"
fi

# Reaching the control plane --------------------------------------------------
hostport=${KB_KUBELET_SERVER#*://}
hostport=${hostport%%/*}
host=${hostport%:*}
case "$host" in
    *[!0-9.]* | "")
        case "$host" in
            \[*) skip dns dns_ip_endpoint "the endpoint is an IP address" ;;
            *)
                if command -v getent >/dev/null 2>&1; then
                    addr=$(getent hosts "$host" | awk '{ print $1; exit }')
                    [ -n "$addr" ] || fail dns dns_unresolved "cannot resolve $host; check this machine's DNS servers" "host=$host"
                    ok dns dns_resolved "$host is $addr" "host=$host" "address=$addr"
                else
                    skip dns dns_unchecked "getent is not available; resolution is checked by the next step"
                fi
                ;;
        esac
        ;;
    *) skip dns dns_ip_endpoint "the endpoint is an IP address" ;;
esac

# shellcheck disable=SC2086
curl -sS -o /dev/null -m 15 $KB_CA_OPT "$KB_KUBELET_SERVER/version" 2>"$KB_TMP/api.err"
case $? in
    0) ok api api_reached "reached $KB_KUBELET_SERVER" "endpoint=$KB_KUBELET_SERVER" ;;
    6) fail api api_unresolved "cannot resolve the control plane host of $KB_KUBELET_SERVER" "endpoint=$KB_KUBELET_SERVER" ;;
    7) fail api api_refused "the control plane at $KB_KUBELET_SERVER refused the connection; is a firewall in the way?" "endpoint=$KB_KUBELET_SERVER" ;;
    28) fail api api_timeout "no answer from the control plane at $KB_KUBELET_SERVER within 15s; is outbound traffic to it allowed?" "endpoint=$KB_KUBELET_SERVER" ;;
    35 | 51 | 53 | 54 | 58 | 59 | 60 | 77 | 80 | 82 | 83 | 90 | 91)
        error=$(cat "$KB_TMP/api.err")
        fail api api_untrusted "TLS with $KB_KUBELET_SERVER failed: the server did not prove it is this cluster's control plane ($error)" \
            "endpoint=$KB_KUBELET_SERVER" "error=$error" ;;
    *)
        error=$(cat "$KB_TMP/api.err")
        fail api api_unreachable "could not reach $KB_KUBELET_SERVER: $error" "endpoint=$KB_KUBELET_SERVER" "error=$error" ;;
esac

# Join ------------------------------------------------------------------------
# Taking a use of the token happens here, after every check has passed. The
# platform answers with a bootstrap token made for this attempt alone, which
# the control plane accepts for a few minutes: the join token itself is never
# a credential of the cluster.
code=$(report join running join_taking_use "taking a use of the join token")
case "$code" in
    2??) ;;
    *)
        message=$(reply_message)
        fail join join_refused "the platform refused this join: $message" "message=$message" ;;
esac
KB_BOOTSTRAP=$(sed -n 's/.*"bootstrap_token":"\([a-z0-9]\{6\}\.[a-z0-9]\{16\}\)".*/\1/p' "$KB_TMP/response")
[ -n "$KB_BOOTSTRAP" ] || fail join no_bootstrap_token "the platform did not hand out a bootstrap token for this attempt"
# kubeadm join waits for the kubelet's client certificate. The cluster
# approves none by itself: the platform approves the one request this
# attempt's kubelet files, for this host name, when asked below, and then
# deletes the attempt's bootstrap token.
if [ "$KB_JOIN_METHOD" = kubeadm ]; then
    # kubeadm reads cluster-info at the endpoint, checks it is signed with the
    # token and that its CA is the pinned one, then dials the server it names.
    # The token goes through a file, so it is not on a command line `ps` shows.
    cat > "$KB_TMP/join.yaml" <<KB_JOIN_CONFIGURATION
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "$hostport"
    token: "$KB_BOOTSTRAP"
    caCertHashes:
    - "$KB_CA_HASH"
nodeRegistration:
  name: "$KB_HOSTNAME"
KB_JOIN_CONFIGURATION
    # What a reset leaves behind, kubeadm join's preflight names.
    [ "$KB_FORCE_JOIN" = 1 ] && kubeadm reset -f > "$KB_TMP/reset.log" 2>&1
    kubeadm join --config "$KB_TMP/join.yaml" > "$KB_TMP/join.log" 2>&1 &
else
    # The URL goes through a file, so the token is not on a command line `ps` shows.
    printf 'url = "%s/node/join?token=%s"\n' "$KB_ENDPOINT" "$KB_BOOTSTRAP" > "$KB_TMP/fetch.conf"
    # shellcheck disable=SC2086
    curl -fsSL -m 60 $KB_CA_OPT -o "$KB_TMP/vcluster-join.sh" \
        -K "$KB_TMP/fetch.conf" 2>"$KB_TMP/fetch.err" \
        || { error=$(cat "$KB_TMP/fetch.err")
             fail join join_script_unavailable "the control plane did not hand out its join script: $error" "error=$error"; }
    set --
    [ "$KB_FORCE_JOIN" = 1 ] && set -- --force-join
    # The control plane's script runs kubeadm join.
    sh "$KB_TMP/vcluster-join.sh" "$@" > "$KB_TMP/join.log" 2>&1 &
fi
join_pid=$!
approved=0
tries=0
while [ "$tries" -lt 300 ]; do
    running=0
    kill -0 "$join_pid" 2>/dev/null && running=1
    code=$(report approval running approval_waiting "waiting for the platform to approve this node's certificate")
    case "$code" in
        200) approved=1; break ;;
        202 | 000 | 5??) ;;
        *)
            kill "$join_pid" 2>/dev/null
            wait "$join_pid" 2>/dev/null
            message=$(reply_message)
            fail approval approval_refused "the platform did not approve this node: $message" "message=$message"
            ;;
    esac
    # Asked once more after the control plane's script ended, then no more.
    [ "$running" = 1 ] || break
    tries=$((tries + 1))
    sleep 1
done
[ "$approved" = 1 ] && ok approval approved "the platform approved this node's certificate"
wait "$join_pid"
status=$?
cat "$KB_TMP/join.log"
if [ "$status" != 0 ]; then
    output=$(tail -n 3 "$KB_TMP/join.log" | tr '\n' ' ')
    if [ "$KB_JOIN_METHOD" = kubeadm ]; then
        fail join kubeadm_failed "kubeadm join failed ($status): $output" "status=$status" "output=$output"
    fi
    fail join join_script_failed "the control plane's join script failed ($status): $output" "status=$status" "output=$output"
fi
[ "$approved" = 1 ] || fail approval approval_timeout "the platform did not approve this node in time"
ok join kubelet_registered "kubelet registered with the control plane"

report done ok joined "joined as $KB_HOSTNAME" "hostname=$KB_HOSTNAME" >/dev/null || true
say "Done: $KB_HOSTNAME joined $KB_CLUSTER. It shows up in the console once its kubelet reports ready."
