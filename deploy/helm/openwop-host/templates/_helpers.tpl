{{/* Names and labels. */}}
{{- define "openwop.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "openwop.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "openwop.labels" -}}
{{ include "openwop.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* A component's labels: (dict "root" $ "component" "web"). */}}
{{- define "openwop.componentLabels" -}}
{{ include "openwop.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "openwop.componentSelector" -}}
{{ include "openwop.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "openwop.image" -}}
{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end -}}

{{- define "openwop.secretRef" -}}
valueFrom:
  secretKeyRef:
    name: {{ .name | quote }}
    key: {{ .key | quote }}
{{- end -}}

{{/* The environment every process shares: (dict "root" $ "poolSize" N "asyncPoolSize" M "direct" bool
"metricsPort" bool: OPENWOP_METRICS_PORT, for the processes with no web server, worker and gRPC). */}}
{{- define "openwop.env" -}}
{{- $v := .root.Values -}}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: DJANGO_DEBUG
  value: "0"
- name: DJANGO_ALLOWED_HOSTS
  value: {{ printf "%s,$(POD_IP)" (join "," $v.allowedHosts) | quote }}
- name: OPENWOP_PUBLIC_URL
  value: {{ $v.publicUrl | quote }}
- name: DJANGO_SECURE_SSL_REDIRECT
  value: {{ ternary "1" "0" $v.sslRedirect | quote }}
- name: OPENWOP_LOG_FORMAT
  value: {{ $v.logFormat | quote }}
- name: OPENWOP_GRPC_ENABLED
  value: {{ ternary "1" "0" $v.grpc.enabled | quote }}
- name: OPENWOP_GRPC_PORT
  value: {{ $v.grpc.port | quote }}
{{- if $v.grpc.publicAddress }}
- name: OPENWOP_GRPC_URL
  value: {{ $v.grpc.publicAddress | quote }}
{{- end }}
{{- if $v.metrics.allowCidrs }}
- name: OPENWOP_METRICS_ALLOW_CIDRS
  value: {{ join "," $v.metrics.allowCidrs | quote }}
{{- end }}
{{- if and .metricsPort $v.metrics.processPort }}
- name: OPENWOP_METRICS_PORT
  value: {{ $v.metrics.processPort | quote }}
{{- end }}
{{- if .poolSize }}
- name: DATABASE_POOL_MAX_SIZE
  value: {{ .poolSize | quote }}
{{- end }}
{{- if .asyncPoolSize }}
- name: OPENWOP_ASYNC_POOL_MAX_SIZE
  value: {{ .asyncPoolSize | quote }}
{{- end }}
{{- if and $v.pgbouncer.enabled .direct }}
{{- /* The migrations hook: PostgreSQL itself, as if there were no pooler. */}}
- name: DATABASE_URL
  {{- include "openwop.secretRef" $v.secrets.databaseDirectUrl | nindent 2 }}
{{- else }}
- name: DATABASE_URL
  {{- include "openwop.secretRef" $v.secrets.databaseUrl | nindent 2 }}
{{- if $v.pgbouncer.enabled }}
- name: OPENWOP_DB_TRANSACTION_POOLER
  value: "1"
- name: DATABASE_DIRECT_URL
  {{- include "openwop.secretRef" $v.secrets.databaseDirectUrl | nindent 2 }}
{{- end }}
{{- end }}
- name: REDIS_URL
  {{- include "openwop.secretRef" $v.secrets.redisUrl | nindent 2 }}
- name: DJANGO_SECRET_KEY
  {{- include "openwop.secretRef" $v.secrets.djangoSecretKey | nindent 2 }}
{{- with $v.secrets.celeryBrokerUrl }}
- name: CELERY_BROKER_URL
  {{- include "openwop.secretRef" . | nindent 2 }}
{{- end }}
{{- range $name, $value := $v.config }}
- name: {{ $name }}
  value: {{ $value | quote }}
{{- end }}
{{- range $v.secretEnv }}
- name: {{ .name }}
  {{- include "openwop.secretRef" (dict "name" .secretName "key" .key) | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Non-root, no privilege, read-only root filesystem: /tmp is the one writable place. */}}
{{- define "openwop.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* What every pod spec shares, before its containers. */}}
{{- define "openwop.podCommon" -}}
{{- $v := .Values -}}
automountServiceAccountToken: false
enableServiceLinks: false
{{- with $v.serviceAccountName }}
serviceAccountName: {{ . }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- with $v.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 256Mi
{{- end -}}

{{- define "openwop.volumeMounts" -}}
volumeMounts:
  - name: tmp
    mountPath: /tmp
{{- end -}}

{{- define "openwop.podMeta" -}}
{{- $root := .root -}}
labels:
  {{- include "openwop.componentSelector" . | nindent 2 }}
  {{- with $root.Values.podLabels }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- with $root.Values.podAnnotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* How many pods a component can run at once: the HPA's maximum (else its replica count), plus
the surge of a rolling update (25%, rounded up) when an upgrade lands at that maximum. */}}
{{- define "openwop.podsAtMost" -}}
{{- $n := ternary .autoscaling.maxReplicas .replicas .autoscaling.enabled | int -}}
{{- add $n (div (add (mul $n 25) 99) 100) -}}
{{- end -}}

{{/* The PostgreSQL connections the release can open at its maxima (docs/operators/helm.md
"Database connections"), as YAML: each component's pods x per pod, the direct ones a pooler cannot
carry, and the totals. Per serving pod (web, gRPC): its Django pool (databasePoolMaxSize), the
doors' async pool (asyncPoolMaxSize) and the cache-invalidation listener (LISTEN); per worker pod:
one per thread (concurrency) and the listener; beat: its leader lock and one Django connection;
the migrations hook: one, while the previous release serves. Behind a transaction pooler the
pools are the pooler's clients and PostgreSQL sees pgbouncer.poolSize for them; the listeners,
beat's lock, retention's lock and the migrations connect directly (DATABASE_DIRECT_URL). */}}
{{- define "openwop.connections" -}}
{{- $v := .Values -}}
{{- $web := include "openwop.podsAtMost" $v.web | int -}}
{{- $grpc := ternary (include "openwop.podsAtMost" $v.grpc | int) 0 $v.grpc.enabled -}}
{{- $worker := include "openwop.podsAtMost" $v.worker | int -}}
{{- $webPooled := mul $web (add $v.web.databasePoolMaxSize $v.web.asyncPoolMaxSize) -}}
{{- $grpcPooled := mul $grpc (add $v.grpc.databasePoolMaxSize $v.grpc.asyncPoolMaxSize) -}}
{{- $workerPooled := mul $worker $v.worker.concurrency -}}
{{- $listeners := add $web $grpc $worker -}}
{{- $pooled := add $webPooled $grpcPooled $workerPooled 1 -}}{{/* + beat's Django connection */}}
{{- $direct := add $listeners 1 1 -}}{{/* + beat's leader lock, the migrations hook */}}
{{- if $v.pgbouncer.enabled }}
{{- $direct = add $direct 1 -}}{{/* + retention's lock, on its own direct connection */}}
{{- end }}
webPods: {{ $web }}
grpcPods: {{ $grpc }}
workerPods: {{ $worker }}
web: {{ $webPooled }}
grpc: {{ $grpcPooled }}
worker: {{ $workerPooled }}
listeners: {{ $listeners }}
pooled: {{ $pooled }}
direct: {{ $direct }}
total: {{ ternary (add $v.pgbouncer.poolSize $direct) (add $pooled $direct) $v.pgbouncer.enabled }}
budget: {{ sub $v.database.maxConnections $v.database.reservedConnections }}
{{- end -}}

{{/* Refuse to render when the maxima can open more connections than the database takes. */}}
{{- define "openwop.checkConnections" -}}
{{- $v := .Values -}}
{{- $c := include "openwop.connections" . | fromYaml -}}
{{- $total := $c.total | int -}}
{{- $budget := $c.budget | int -}}
{{- if gt $total $budget }}
{{- if $v.pgbouncer.enabled }}
{{- fail (printf "database connections: at the autoscalers' maxima the release can open %d (pgbouncer.poolSize %d + %d direct: %d cache listeners, one per web/gRPC/worker pod, beat's lock, retention's lock, the migrations hook) but database.maxConnections %d - database.reservedConnections %d leaves %d. Lower pgbouncer.poolSize or the maxReplicas, or raise database.maxConnections to at least %d (PostgreSQL's max_connections)." $total ($v.pgbouncer.poolSize | int) ($c.direct | int) ($c.listeners | int) ($v.database.maxConnections | int) ($v.database.reservedConnections | int) $budget (add $total $v.database.reservedConnections)) }}
{{- else }}
{{- fail (printf "database connections: at the autoscalers' maxima the release can open %d (web %d pods x %d = %d, gRPC %d pods x %d = %d, worker %d pods x %d = %d, beat 2, migrations 1; pods include a rolling update's surge) but database.maxConnections %d - database.reservedConnections %d leaves %d. Lower the maxReplicas, databasePoolMaxSize, asyncPoolMaxSize or worker.concurrency, put a transaction pooler in front (pgbouncer.enabled), or raise database.maxConnections to at least %d (PostgreSQL's max_connections)." $total ($c.webPods | int) (add $v.web.databasePoolMaxSize $v.web.asyncPoolMaxSize 1) (add $c.web $c.webPods) ($c.grpcPods | int) (add $v.grpc.databasePoolMaxSize $v.grpc.asyncPoolMaxSize 1) (add $c.grpc $c.grpcPods) ($c.workerPods | int) (add $v.worker.concurrency 1) (add $c.worker $c.workerPods) ($v.database.maxConnections | int) ($v.database.reservedConnections | int) $budget (add $total $v.database.reservedConnections)) }}
{{- end }}
{{- end }}
{{- if $v.pgbouncer.enabled }}
{{- $clients := $c.pooled | int -}}
{{- if gt $clients ($v.pgbouncer.maxClientConnections | int) }}
{{- fail (printf "pgbouncer.maxClientConnections %d is below the %d client connections the release's pools can open at their maxima (PgBouncer's max_client_conn): raise both, or lower the maxReplicas or pool sizes." ($v.pgbouncer.maxClientConnections | int) $clients) }}
{{- end }}
{{- end }}
{{- end -}}

{{/* A serving container's preStop: it keeps serving while the Service and the balancer take it out
of rotation, then gets SIGTERM; the grace period must outlast the sleep. (dict "root" $ "component" "web"). */}}
{{- define "openwop.preStop" -}}
{{- $s := index .root.Values .component -}}
{{- if le ($s.terminationGracePeriodSeconds | int) ($s.preStopSleepSeconds | int) }}
{{- fail (printf "%s.terminationGracePeriodSeconds (%d) must exceed %s.preStopSleepSeconds (%d): the pod is killed before it drains" .component ($s.terminationGracePeriodSeconds | int) .component ($s.preStopSleepSeconds | int)) }}
{{- end -}}
{{- if $s.preStopSleepSeconds }}
lifecycle:
  preStop:
    exec:
      command: ["sleep", {{ $s.preStopSleepSeconds | quote }}]
{{- end }}
{{- end -}}

{{/* The container port of OPENWOP_METRICS_PORT (worker and gRPC pods), as a `ports` item. */}}
{{- define "openwop.metricsPort" -}}
{{- if .Values.metrics.processPort }}
- name: metrics
  containerPort: {{ .Values.metrics.processPort }}
  protocol: TCP
{{- end }}
{{- end -}}
