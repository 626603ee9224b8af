package pool

var TakeWith = take
