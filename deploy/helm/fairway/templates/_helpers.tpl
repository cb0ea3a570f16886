{{/* Names and labels. */}}
{{- define "fairway.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "fairway.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "fairway.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fairway.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "fairway.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "fairway.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fairway
{{- end -}}

{{- define "fairway.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "fairway.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "fairway.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the secret key and the admin token. */}}
{{- define "fairway.appSecretName" -}}
{{- default (printf "%s-app" (include "fairway.fullname" .)) .Values.secrets.existingSecret -}}
{{- end -}}

{{/* The Secret with the in-chart databases' password and URLs (trials). */}}
{{- define "fairway.trialSecretName" -}}
{{- printf "%s-trial-databases" (include "fairway.fullname" .) -}}
{{- end -}}

{{- define "fairway.databaseSecretRef" -}}
{{- if .Values.trialDatabases.enabled -}}
name: {{ include "fairway.trialSecretName" . }}
key: database-url
{{- else -}}
name: {{ required "database.existingSecret: name the Secret that holds the Postgres URL (or enable trialDatabases)" .Values.database.existingSecret }}
key: {{ .Values.database.secretKey }}
{{- end -}}
{{- end -}}

{{- define "fairway.redisSecretRef" -}}
{{- if .Values.trialDatabases.enabled -}}
name: {{ include "fairway.trialSecretName" . }}
key: redis-url
{{- else -}}
name: {{ required "redis.existingSecret: name the Secret that holds the Redis URL (or enable trialDatabases)" .Values.redis.existingSecret }}
key: {{ .Values.redis.secretKey }}
{{- end -}}
{{- end -}}

{{/*
A value kept across upgrades: the Secret's current value when it exists in the cluster (lookup
sees the cluster at install and upgrade), else a new random one. Offline renders (helm
template, the tests) always get a new one.
*/}}
{{- define "fairway.keptSecretValue" -}}
{{- $current := lookup "v1" "Secret" .namespace .name -}}
{{- if and $current $current.data (hasKey $current.data .key) -}}
{{- index $current.data .key -}}
{{- else -}}
{{- printf "%s%s" (default "" .prefix) (randAlphaNum (int .length)) | b64enc -}}
{{- end -}}
{{- end -}}

{{/* The served model name the API and the dispatcher are configured with: the first model's. */}}
{{- define "fairway.firstServedName" -}}
{{- with .Values.models -}}{{- (first .).servedName -}}{{- end -}}
{{- end -}}

{{/*
The environment every Fairway process shares: production mode, the connections and the
secrets from Secrets, logs, metrics binding, the data directory, and the user's FAIRWAY_*.
*/}}
{{- define "fairway.commonEnv" -}}
- name: FAIRWAY_ENVIRONMENT
  value: production
- name: FAIRWAY_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "fairway.databaseSecretRef" . | nindent 6 }}
- name: FAIRWAY_REDIS_URL
  valueFrom:
    secretKeyRef:
      {{- include "fairway.redisSecretRef" . | nindent 6 }}
- name: FAIRWAY_SECRET_KEY
  valueFrom:
    secretKeyRef:
      name: {{ include "fairway.appSecretName" . }}
      key: secret-key
- name: FAIRWAY_ADMIN_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "fairway.appSecretName" . }}
      key: admin-token
- name: FAIRWAY_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
- name: FAIRWAY_METRICS_HOST
  value: 0.0.0.0
- name: FAIRWAY_DATA_DIR
  value: /var/lib/fairway
- name: FAIRWAY_FILES_DIR
  value: /var/lib/fairway/files
- name: HOME
  value: /home/fairway
{{- range $name, $value := .Values.env }}
- name: {{ $name }}
  value: {{ $value | toString | quote }}
{{- end }}
{{- end -}}

{{/* The container security context of every Fairway container. */}}
{{- define "fairway.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: {{ . }}
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Writable places: the data directory (files, unless a shared claim), HOME and /tmp. */}}
{{- define "fairway.dataVolumes" -}}
- name: data
  emptyDir: {}
- name: home
  emptyDir: {}
- name: tmp
  emptyDir: {}
{{- if .Values.files.existingClaim }}
- name: files
  persistentVolumeClaim:
    claimName: {{ .Values.files.existingClaim }}
{{- end }}
{{- end -}}

{{- define "fairway.dataMounts" -}}
- name: data
  mountPath: /var/lib/fairway
- name: home
  mountPath: /home/fairway
- name: tmp
  mountPath: /tmp
{{- if .Values.files.existingClaim }}
- name: files
  mountPath: /var/lib/fairway/files
{{- end }}
{{- end -}}

{{/* Checks across values that the schema cannot express, with messages that say what to do. */}}
{{- define "fairway.validate" -}}
{{- range $name := list "FAIRWAY_DATABASE_URL" "FAIRWAY_REDIS_URL" "FAIRWAY_SECRET_KEY" "FAIRWAY_ADMIN_TOKEN" -}}
{{- if or (hasKey $.Values.env $name) (hasKey $.Values.workerDefaults.env $name) -}}
{{- fail (printf "env.%s: connection URLs and secrets never go in values; the chart reads them from Secrets (database.existingSecret, redis.existingSecret, secrets.existingSecret)" $name) -}}
{{- end -}}
{{- end -}}
{{- $seen := dict -}}
{{- range $i, $m := .Values.models -}}
{{- if hasKey $seen $m.name -}}
{{- fail (printf "models[%d].name %q is used twice: each model needs its own name" $i $m.name) -}}
{{- end -}}
{{- $_ := set $seen $m.name true -}}
{{- if hasKey $seen (printf "served:%s" $m.servedName) -}}
{{- fail (printf "models[%d].servedName %q is served by another entry: give one model one entry (raise its replicas)" $i $m.servedName) -}}
{{- end -}}
{{- $_ := set $seen (printf "served:%s" $m.servedName) true -}}
{{- $w := mergeOverwrite (deepCopy $.Values.workerDefaults) (deepCopy $m) -}}
{{- $sources := 0 -}}
{{- range $kind := list "pvc" "hostPath" "download" -}}
{{- if hasKey ($m.source | default dict) $kind -}}{{- $sources = add1 $sources -}}{{- end -}}
{{- end -}}
{{- if ne (int $sources) 1 -}}
{{- fail (printf "models[%d] (%s): source needs exactly one of pvc, hostPath or download" $i $m.name) -}}
{{- end -}}
{{- range $name := list "FAIRWAY_DATABASE_URL" "FAIRWAY_REDIS_URL" "FAIRWAY_SECRET_KEY" "FAIRWAY_ADMIN_TOKEN" -}}
{{- if hasKey ($m.env | default dict) $name -}}
{{- fail (printf "models[%d].env.%s: connection URLs and secrets never go in values; the chart reads them from Secrets" $i $name) -}}
{{- end -}}
{{- end -}}
{{- if and (gt (int $w.gpu.count) 0) (gt (int $w.engine.tensorParallelSize) (int $w.gpu.count)) -}}
{{- fail (printf "models[%d] (%s): engine.tensorParallelSize %d needs at least that many GPUs (gpu.count is %d)" $i $m.name (int $w.engine.tensorParallelSize) (int $w.gpu.count)) -}}
{{- end -}}
{{- if gt (int $w.engine.tensorParallelSize) 1 -}}
{{- fail (printf "models[%d] (%s): engine.tensorParallelSize %d: the Fairway worker does not pass a tensor parallel size to vLLM yet (no FAIRWAY_* setting for it), so only 1 is accepted" $i $m.name (int $w.engine.tensorParallelSize)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
