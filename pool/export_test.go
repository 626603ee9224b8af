package pool

var TakeWith = take

var RetryAPI = retryAPI
