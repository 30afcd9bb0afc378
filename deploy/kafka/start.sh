#!/bin/sh
# Starts a node of the compose deployment's Apache Kafka cluster (docker-compose.yml,
# services `kafka-1`, `kafka-2`, `kafka-3`): a KRaft node that is broker and controller in
# one, whose clients must log in with SASL/SCRAM-SHA-512. The apache/kafka image
# configures a node from KAFKA_* variables but cannot create SCRAM users, so this script
# writes the node's server.properties, formats new storage with the user
# (kafka-storage.sh format --add-scram) and then becomes the broker. docs/deploy.md
# ("Kafka") and docs/security.md describe it.
#
#   client listener   SASL_PLAINTEXT :9092 on every address of the node, advertised as
#                     KAFKA_ADVERTISED_HOST:9092, SCRAM-SHA-512; the brokers' own
#                     (inter-broker, replication) connections log in on it too
#   controller        KAFKA_CONTROLLER_HOST:9093 only: 127.0.0.1 by default (one node:
#                     nothing outside the container reaches it); in compose the node's
#                     alias on the internal kafka-quorum network, which only the Kafka
#                     nodes join
#   quorum            KAFKA_CONTROLLER_QUORUM_VOTERS, id@host:port of every controller
#                     (by default this node alone); every node is a voter, so their
#                     number is the cluster's size
#   replication       from that size, as the test suite's clusters have it
#                     (feed.devstack.kafka.replication_settings): three nodes keep three
#                     copies of every topic, the internal ones too, and an acks=all
#                     write needs two in sync; one node keeps one
#   authorization     StandardAuthorizer; the one user is a super user, and so is the
#                     controller listener's ANONYMOUS principal (the controllers and
#                     brokers of the cluster itself); any other user gets nothing
#                     without ACLs
#
# The password comes from a file (a compose secret), never from the environment or a
# command line; it is written only into files of this container readable by its user.
set -eu

: "${KAFKA_CLUSTER_ID:?KAFKA_CLUSTER_ID must be set (see .env.example)}"
: "${KAFKA_SASL_PASSWORD_FILE:?KAFKA_SASL_PASSWORD_FILE must name the password file}"
user="${KAFKA_SASL_USERNAME:-starling}"
home="${KAFKA_HOME:-/opt/kafka}"
log_dirs="${KAFKA_LOG_DIRS:-/var/lib/kafka/data}"
conf="${KAFKA_CONFIG_DIR:-/tmp/starling-kafka}"
host="${KAFKA_ADVERTISED_HOST:-kafka}"
bind="${KAFKA_LISTEN_HOST:-}"
port="${KAFKA_PORT:-9092}"
node_id="${KAFKA_NODE_ID:-1}"
controller_host="${KAFKA_CONTROLLER_HOST:-127.0.0.1}"
controller_port="${KAFKA_CONTROLLER_PORT:-9093}"
voters="${KAFKA_CONTROLLER_QUORUM_VOTERS:-$node_id@$controller_host:$controller_port}"

if [ ! -r "$KAFKA_SASL_PASSWORD_FILE" ]; then
    echo "kafka: cannot read KAFKA_SASL_PASSWORD_FILE ($KAFKA_SASL_PASSWORD_FILE)" >&2
    exit 1
fi
password="$(cat "$KAFKA_SASL_PASSWORD_FILE")"
# The password goes into a JAAS string, a properties file and --add-scram's list, each
# with its own quoting: accept only characters none of them treats specially.
case "$password" in
    "")
        echo "kafka: the password in $KAFKA_SASL_PASSWORD_FILE is empty: set KAFKA_PASSWORD in .env" >&2
        exit 1
        ;;
    *[!A-Za-z0-9._~-]*)
        echo "kafka: KAFKA_PASSWORD may hold only letters, digits and . _ ~ - (generate it with: openssl rand -hex 32)" >&2
        exit 1
        ;;
esac
case "$user" in
    "" | *[!A-Za-z0-9._-]*)
        echo "kafka: KAFKA_SASL_USERNAME may hold only letters, digits and . _ -" >&2
        exit 1
        ;;
esac

case "$node_id" in
    "" | *[!0-9]*)
        echo "kafka: KAFKA_NODE_ID must be a number (1, 2, 3)" >&2
        exit 1
        ;;
esac
case "$voters" in
    "" | *[!A-Za-z0-9.:@,_-]*)
        echo "kafka: KAFKA_CONTROLLER_QUORUM_VOTERS must be id@host:port,... (e.g. 1@kafka-1-quorum:9093,2@kafka-2-quorum:9093,3@kafka-3-quorum:9093)" >&2
        exit 1
        ;;
esac
# This node must be one of the voters, at the address its controller listens on.
case ",$voters," in
    *",$node_id@$controller_host:$controller_port,"*) ;;
    *)
        echo "kafka: KAFKA_CONTROLLER_QUORUM_VOTERS ($voters) does not name this node ($node_id@$controller_host:$controller_port)" >&2
        exit 1
        ;;
esac
not_a_voter() {
    echo "kafka: $1 in KAFKA_CONTROLLER_QUORUM_VOTERS is not id@host:port" >&2
    exit 1
}
nodes=0
for voter in $(echo "$voters" | tr ',' ' '); do
    case "$voter" in *?@?*:?*) ;; *) not_a_voter "$voter" ;; esac
    voter_id="${voter%%@*}"
    voter_port="${voter##*:}"
    case "$voter_id" in *[!0-9]*) not_a_voter "$voter" ;; esac
    case "$voter_port" in *[!0-9]*) not_a_voter "$voter" ;; esac
    nodes=$((nodes + 1))
done
# Three copies of every topic once there are three nodes, two in sync for a write; one
# node keeps one copy (feed.devstack.kafka.replication_settings, the tests' clusters).
if [ "$nodes" -ge 3 ]; then replicas=3; else replicas=$nodes; fi
if [ "$nodes" -eq 1 ]; then in_sync=1; else in_sync=2; fi

umask 077
mkdir -p "$conf"
jaas="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$user\" password=\"$password\";"

cat > "$conf/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=$node_id
controller.quorum.voters=$voters
listeners=SASL_PLAINTEXT://$bind:$port,CONTROLLER://$controller_host:$controller_port
advertised.listeners=SASL_PLAINTEXT://$host:$port
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=$jaas
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:$user;User:ANONYMOUS
log.dirs=$log_dirs
auto.create.topics.enable=false
default.replication.factor=$replicas
min.insync.replicas=$in_sync
offsets.topic.replication.factor=$replicas
transaction.state.log.replication.factor=$replicas
transaction.state.log.min.isr=$in_sync
share.coordinator.state.topic.replication.factor=$replicas
share.coordinator.state.topic.min.isr=$in_sync
PROPERTIES

# What the health check (and an operator's kafka-*.sh --command-config) logs in with.
cat > "$conf/client.properties" <<PROPERTIES
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$jaas
PROPERTIES

# New storage is formatted with the user (its credentials then live in the cluster's
# metadata: docs/deploy.md says how to change them). The password is on the format
# command's line for the second it runs, once per storage, inside this container.
# Storage formatted otherwise (without the user) is refused, rather than serving a
# listener nobody can log in to.
marker="$log_dirs/starling-scram-user"
if [ -f "$log_dirs/meta.properties" ]; then
    if [ ! -f "$marker" ]; then
        echo "kafka: $log_dirs was formatted without the SCRAM user; see docs/deploy.md (Kafka)" >&2
        exit 1
    fi
else
    mkdir -p "$log_dirs"
    echo "$user" > "$marker"
    "$home/bin/kafka-storage.sh" format \
        --cluster-id "$KAFKA_CLUSTER_ID" --config "$conf/server.properties" \
        --add-scram "SCRAM-SHA-512=[name=$user,password=$password]"
fi

exec "$home/bin/kafka-server-start.sh" "$conf/server.properties"
