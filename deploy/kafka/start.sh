#!/bin/sh
# Starts the compose deployment's Apache Kafka node (docker-compose.yml, service `kafka`):
# one KRaft node, broker and controller in one, whose clients must log in with
# SASL/SCRAM-SHA-512. The apache/kafka image configures a node from KAFKA_* variables
# but cannot create SCRAM users, so this script writes the node's server.properties,
# formats new storage with the user (kafka-storage.sh format --add-scram) and then
# becomes the broker. docs/deploy.md ("Kafka") and docs/security.md describe it.
#
#   client listener   SASL_PLAINTEXT :9092, advertised as kafka:9092, SCRAM-SHA-512;
#                     the broker's own (inter-broker) connections log in on it too
#   controller        127.0.0.1:9093 only: nothing outside the container reaches it
#   authorization     StandardAuthorizer; the one user is a super user, and so is the
#                     controller listener's ANONYMOUS principal (this node itself);
#                     any other user gets nothing without ACLs
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
controller_port="${KAFKA_CONTROLLER_PORT:-9093}"

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

umask 077
mkdir -p "$conf"
jaas="org.apache.kafka.common.security.scram.ScramLoginModule required username=\"$user\" password=\"$password\";"

cat > "$conf/server.properties" <<PROPERTIES
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=SASL_PLAINTEXT://$bind:$port,CONTROLLER://127.0.0.1:$controller_port
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
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
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
