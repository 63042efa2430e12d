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

{{/* The environment every process shares: (dict "root" $ "poolSize" N). */}}
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
{{- if .poolSize }}
- name: DATABASE_POOL_MAX_SIZE
  value: {{ .poolSize | quote }}
{{- end }}
- name: DATABASE_URL
  {{- include "openwop.secretRef" $v.secrets.databaseUrl | nindent 2 }}
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
